"""rcb-env's tasks as a Harbor dataset (``rcb-env export harbor``) and a run's episodes as ATIF
trajectories (``rcb-env export --format atif``), checked with the real ``harbor`` package (its
own venv: Harbor needs Python >= 3.12; ``scripts/install.sh`` makes it) and, for the
verification, in the real per-paper images on the local Docker engine."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rcb_env import config
from rcb_env.cli import cli
from rcb_env.errors import ConfigError
from rcb_env.execution import ExecResult
from rcb_env.grading import GradingConfig
from rcb_env.grading.verdict import classify
from rcb_env.guest import harbor_verify as verify
from rcb_env.integrations.harbor import export_harbor, harbor_python, task_name
from rcb_env.rl.atif import export_atif
from rcb_env.rl.export import TrajectoryLog
from rcb_env.rl.trajectory import ModelTurn, Trajectory, TrajectoryStep
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig
from rcb_env.sandbox.backends.docker import images as img
from rcb_env.task import bundled_root, load
from rcb_env.task.regions import extract_span
from tests.conftest import DOCKER_BASE, NUMPY_PAPERS

HERE = Path(__file__).resolve().parents[1]  # tests/


@pytest.fixture(scope="session")
def harbor() -> Path:
    """Harbor's interpreter; skips without it on a developer's machine, FAILS in CI."""
    python = harbor_python()
    if python is None:
        if os.environ.get("CI"):
            pytest.fail("the Harbor venv (scripts/install.sh) is required in CI")
        pytest.skip("Harbor is not installed (scripts/install.sh makes <venv>/harbor)")
    return python


def _in_harbor(python: Path, code: str, *args: str) -> Any:
    """Run ``code`` in Harbor's interpreter; the JSON it prints last."""
    run = subprocess.run(
        [str(python), "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _export(dest: Path, papers: set[str] | None = None) -> Any:
    pset = load(bundled_root(), papers=papers)
    cfg = img.ImageConfig(base=DOCKER_BASE)
    return export_harbor(pset, dest, image_for=lambda p: img.image_tag(p, cfg), name="bundled")


def test_every_exported_task_loads_in_harbor_and_hides_the_answer(
    tmp_path: Path, harbor: Path
) -> None:
    pset = load(bundled_root())
    report = _export(tmp_path / "ds")
    snippets = [s for p in pset.papers for s in p.snippets if not s.unavailable]
    assert sorted(report.tasks) == sorted(task_name(s) for s in snippets)
    loaded = _in_harbor(
        harbor,
        """
        import json, sys, pathlib
        from harbor.models.task.task import Task
        from harbor.models.registry import Registry
        root = pathlib.Path(sys.argv[1])
        reg = Registry.from_path(root / "registry.json")
        out = {}
        for entry in reg.datasets[0].tasks:
            t = Task(root / entry.path)
            out[t.name] = {"weight": t.config.metadata["weight"],
                           "workdir": t.config.environment.workdir,
                           "test": str(t.paths.discovered_test_path),
                           "solve": str(t.paths.discovered_solve_path)}
        print(json.dumps(out))
        """,
        str(tmp_path / "ds"),
    )
    assert sorted(loaded) == sorted(report.tasks)
    for s in snippets:
        entry = loaded[task_name(s)]
        assert entry["weight"] == s.weight
        assert entry["workdir"] == "/workspace"
        assert entry["test"].endswith("tests/test.sh")
        assert entry["solve"].endswith("solution/solve.sh")
    # what the agent's image is built from: the masked repository only
    for p in pset.papers:
        for s in p.snippets:
            folder = tmp_path / "ds" / task_name(s)
            workspace = folder / "environment" / "workspace"
            files = {f.relative_to(workspace).as_posix() for f in workspace.rglob("*")}
            assert p.test_file not in files
            assert not [f for f in files if f.endswith("_ref.py")]
            assert not set(p.hidden_paths) & files
            assert (workspace / s.file).read_text() == s.masked_text
            dockerfile = (folder / "environment" / "Dockerfile").read_text()
            assert f"FROM {img.image_tag(p, img.ImageConfig(base=DOCKER_BASE))}\n" in dockerfile
            assert (folder / "tests" / "paper" / p.test_file).is_file()  # only at verification


def test_export_harbor_cli_and_bad_destination(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["export", "harbor", "-o", str(tmp_path / "ds"), "--name", "mine"])
    assert res.exit_code == 0, res.output
    registry = json.loads((tmp_path / "ds" / "registry.json").read_text())
    assert registry[0]["name"] == "mine"
    assert len(registry[0]["tasks"]) == len(
        [s for p in load(bundled_root()).papers for s in p.snippets]
    )
    again = runner.invoke(cli, ["export", "harbor", "-o", str(tmp_path / "ds")])
    assert isinstance(again.exception, ConfigError)
    assert "not empty" in str(again.exception)


def test_the_verifier_reads_bodies_and_reports_as_rcb_env_does() -> None:
    """The container's stdlib verifier follows rcb-env's own rules: the body read back from the
    edited file, and the verdict from the runner's events. They are written once (the grading
    protocol, shipped beside the verifier), so this is a smoke test of the wrapping on each
    side."""
    from rcb_env.guest import protocol

    assert verify.classify.__code__ is not protocol.classify.__code__  # run from its own copy
    assert verify.classify.__code__.co_filename == protocol.__file__
    masked = "a\nb\n    # TODO x\n    # n lines\nc\nd\n"
    for edited in (
        "a\nb\n    return 1\nc\nd\n",
        "a\nb\n    x = 1\n\n    return x\nc\nd\n",
        "a\nB\n    return 1\nc\nd\nextra\n",
        "a\nb\nc\nd\n",
        "",
        "    return 1\n",
    ):
        assert verify.extract_span(masked, 2, 4, edited) == extract_span(masked, 2, 4, edited)
    start, test = {"event": "start"}, {"event": "test", "id": "T.a", "status": "passed"}
    done = {"event": "done", "code": 0}
    cases: list[tuple[list[dict[str, Any]], dict[str, Any], tuple[str, ...]]] = [
        ([start, test, done], {}, ("T.a",)),
        ([start, {**test, "status": "failed"}, done], {}, ("T.a",)),
        ([start, test, done], {}, ("T.a", "T.b")),
        ([start, test], {}, ("T.a",)),
        ([], {"exit_code": 1, "stderr": "boom"}, ("T.a",)),
        ([start, test, done], {"timed_out": True, "exit_code": None}, ("T.a",)),
        ([start, {"event": "script_error", "exc_type": "ImportError", "message": "x"}], {}, ()),
        ([start, {"event": "script_error", "exc_type": "ValueError", "message": "v"}], {}, ()),
        ([start, {"event": "forged", "line": "x"}, test, done], {}, ("T.a",)),
        ([start, test], {"exit_code": None, "signal": 9}, ("T.a",)),
        ([start, test, done], {"exit_code": 3}, ("T.a",)),
    ]
    for events, run, expected in cases:
        ran = ExecResult(**{"exit_code": 0, **run})
        ours = classify(events, ran, expected)
        theirs = verify.classify(
            events,
            {"exit_code": ran.exit_code, "signal": ran.signal, "timed_out": ran.timed_out,
             "stderr": ran.stderr},
            list(expected),
        )  # fmt: skip
        assert (theirs[0], theirs[1]) == (ours.outcome.value, ours.kind.value), (events, run)
        assert [(t[0], t[1]) for t in theirs[3]] == [(t.name, t.status.value) for t in ours.tests]


def _verified(out: str) -> tuple[str, str, dict[str, Any]]:
    """(exit status line, reward file, details) from the output of ``_SHOW``."""
    lines = out.split("\n")
    i = next(n for n, line in enumerate(lines) if line.startswith("rc="))
    return lines[i], lines[i + 1].strip(), json.loads("\n".join(lines[i + 2 :]))


_SHOW = "echo rc=$?; cat /logs/verifier/reward.txt; cat /logs/verifier/details.json"


def _docker_run(image: str, *mounts: str, script: str) -> subprocess.CompletedProcess[str]:
    args = ["docker", "run", "--rm", "--network", "none"]
    for m in mounts:
        args += ["-v", m]
    return subprocess.run(
        [*args, image, "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.docker
def test_test_sh_grades_the_edited_file_in_the_paper_image(
    tmp_path: Path, docker_images: str
) -> None:
    """In the real image: the oracle's file earns the line weight, the untouched TODO earns 0
    with per-test results, and the agent's container holds no test file or reference copy."""
    report = _export(tmp_path / "ds", {"adamw-warmup"})
    pset = load(bundled_root(), papers={"adamw-warmup"})
    snippet = pset.paper("adamw-warmup").snippet("bias correction")
    folder = tmp_path / "ds" / task_name(snippet)
    assert folder.name in report.tasks
    image = f"rcb-harbor-test-{os.getpid()}"
    subprocess.run(
        ["docker", "build", "-q", "-t", image, str(folder / "environment")],
        check=True,
        capture_output=True,
    )
    try:
        tests = f"{folder / 'tests'}:/tests:ro"
        solution = f"{folder / 'solution'}:/solution:ro"
        solved = _docker_run(
            image,
            tests,
            solution,
            script=f"bash /solution/solve.sh && bash /tests/test.sh; {_SHOW}",
        )
        status, reward, details = _verified(solved.stdout)
        assert status == "rc=0", solved.stdout + solved.stderr
        assert details["outcome"] == "passed"
        assert details["reward"] == snippet.weight
        assert reward == str(snippet.weight)
        assert details["tests"]
        assert all(t["status"] == "passed" for t in details["tests"])
        untouched = _docker_run(image, tests, script=f"bash /tests/test.sh; {_SHOW}")
        status, reward, details = _verified(untouched.stdout)
        assert (status, reward, details["outcome"], details["reward"]) == ("rc=0", "0", "failed", 0)
        assert any(t["status"] in ("failed", "error") for t in details["tests"])
        # before verification, the agent's container has no tests and no reference copy
        seen = _docker_run(image, script="ls /tests 2>&1; find / -name '*_ref.py' 2>/dev/null")
        assert "No such file" in seen.stdout
        assert "_ref.py" not in seen.stdout.replace("No such file", "")
    finally:
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True, check=False)


@pytest.mark.docker
@pytest.mark.slow
def test_harbor_run_with_its_oracle_agent_passes(
    tmp_path: Path, docker_images: str, harbor: Path
) -> None:
    """``harbor run -a oracle`` (Harbor's job, trial, oracle agent and verifier) on the exported
    bundled numpy papers, on the local engine through a plain-docker environment of ours (Harbor's
    own ``docker`` environment needs the Docker Compose v2 plugin)."""
    pset = load(bundled_root(), papers=set(NUMPY_PAPERS))
    _export(tmp_path / "ds", set(NUMPY_PAPERS))
    picked = [p.snippets[0] for p in pset.papers]
    args = [str(harbor.parent / "harbor"), "run", "-p", str(tmp_path / "ds"), "-a", "oracle"]
    for s in picked:
        args += ["-i", task_name(s)]
    args += ["-e", "harbor_plain_docker:PlainDocker", "-n", "2", "-o", str(tmp_path / "jobs")]
    env = {**os.environ, "PYTHONPATH": str(HERE), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    t0 = time.monotonic()
    run = subprocess.run(
        [*args, "-y", "-q"], capture_output=True, text=True, env=env, timeout=900, check=False
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    results = {}
    for trial in (tmp_path / "jobs").glob("*/*/result.json"):
        data = json.loads(trial.read_text())
        results[data["task_name"]] = (data.get("verifier_result") or {}).get("rewards")
    assert results == {task_name(s): {"reward": float(s.weight)} for s in picked}, results
    assert time.monotonic() - t0 < 900


def _rl_run(run_dir: Path) -> Trajectory:
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    t = Trajectory(
        task_id="p/s",
        paper_id="p",
        group_id="g1",
        sample=0,
        weight=3,
        messages=[
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": "reading",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "x = 1"},
            {"role": "assistant", "content": "done"},
        ],
        tools=tools,
        steps=[
            TrajectoryStep(
                index=1, action={"tool": "read_file"}, observation="x = 1", tool_ok=True, env_s=0.1
            )
        ],
        calls=[
            ModelTurn(
                prompt_ids=(1, 2),
                completion_ids=(7, 8),
                logprobs=(-0.1, -0.2),
                finish_reason="tool_calls",
                input_tokens=2,
                output_tokens=2,
            ),
            ModelTurn(
                prompt_ids=(1, 2, 7, 8, 4),
                completion_ids=(9,),
                logprobs=(-0.3,),
                finish_reason="stop",
                input_tokens=5,
                output_tokens=1,
            ),
        ],
        status="completed",
        stop_reason="submit",
        reward=3.0,
        passed=True,
        tokens="full",
    )
    log = TrajectoryLog(run_dir)
    log.append(t)
    log.close()
    return t


_VALIDATE = """
import json, sys, pathlib
from harbor.models.trajectories.trajectory import Trajectory
out = []
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    t = Trajectory.model_validate_json(f.read_text())
    out.append(t.to_json_dict())
print(json.dumps(out))
"""


def test_atif_export_of_an_rl_run_validates_with_harbor(tmp_path: Path, harbor: Path) -> None:
    _rl_run(tmp_path / "run")
    res = CliRunner().invoke(
        cli, ["export", str(tmp_path / "run"), "--format", "atif", "-o", str(tmp_path / "atif")]
    )
    assert res.exit_code == 0, res.output
    (doc,) = _in_harbor(harbor, _VALIDATE, str(tmp_path / "atif"))
    assert doc["schema_version"] == "ATIF-v1.7"
    assert doc["agent"]["tool_definitions"][0]["function"]["name"] == "read_file"
    assert [s["source"] for s in doc["steps"]] == ["system", "user", "agent", "agent"]
    call = doc["steps"][2]
    assert call["tool_calls"] == [
        {"tool_call_id": "c1", "function_name": "read_file", "arguments": {"path": "a.py"}}
    ]
    assert call["observation"]["results"] == [{"source_call_id": "c1", "content": "x = 1"}]
    assert call["metrics"]["prompt_token_ids"] == [1, 2]
    assert call["metrics"]["completion_token_ids"] == [7, 8]
    assert call["metrics"]["logprobs"] == [-0.1, -0.2]
    assert doc["steps"][3]["metrics"]["completion_token_ids"] == [9]
    assert doc["extra"]["reward"] == 3.0
    assert doc["extra"]["passed"] is True
    assert doc["final_metrics"]["total_completion_tokens"] == 3


def test_atif_export_of_an_eval_run_carries_the_grade(
    tmp_path: Path, harbor: Path, require_bwrap: None
) -> None:
    pset = load(bundled_root(), papers={"adamw-warmup"})
    paper = pset.papers[0]
    one = pset.model_copy(
        update={"papers": (paper.model_copy(update={"snippets": paper.snippets[:1]}),)}
    )
    cfg = EvalConfig(
        agent="oracle",
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
    )
    run_eval(one, cfg, tmp_path / "run")
    written = export_atif(tmp_path / "run", tmp_path / "atif")
    assert len(written) == 1
    (doc,) = _in_harbor(harbor, _VALIDATE, str(tmp_path / "atif"))
    grade = doc["extra"]["grade"]
    assert grade["outcome"] == "passed"
    assert grade["tests"]
    assert all(t["status"] == "passed" for t in grade["tests"])
    assert doc["extra"]["reward"] == float(paper.snippets[0].weight)
    assert doc["steps"][0]["source"] == "user"  # the task statement
    assert any(s.get("tool_calls") for s in doc["steps"])
