"""rcb-env's tasks as a Harbor dataset (``rcb-env export harbor``) and a run's episodes as ATIF
trajectories (``rcb-env export --format atif``), checked with the real ``harbor`` package (its
own venv: Harbor needs Python >= 3.12; ``scripts/install.sh`` makes it) and, for the
verification, in the real per-paper images on the local Docker engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rcb_env import config, guest
from rcb_env.cli import cli
from rcb_env.errors import ConfigError
from rcb_env.execution import ExecResult
from rcb_env.grading import GradingConfig
from rcb_env.grading.verdict import classify
from rcb_env.guest import harbor_verify as verify
from rcb_env.guest.rates import harbor_metric
from rcb_env.integrations.harbor import export_harbor, harbor_python, import_harbor_job, task_name
from rcb_env.results.summary import summarize_run
from rcb_env.rl.atif import export_atif
from rcb_env.rl.export import TrajectoryLog
from rcb_env.rl.trajectory import ModelTurn, Trajectory, TrajectoryStep
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig
from rcb_env.sandbox.backends.docker import images as img
from rcb_env.task import bundled_root, load
from rcb_env.task.regions import extract_span
from tests.conftest import DOCKER_BASE

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


def _export(dest: Path, papers: set[str] | None = None, **kw: Any) -> Any:
    pset = load(bundled_root(), papers=papers)
    cfg = img.ImageConfig(base=DOCKER_BASE)
    return export_harbor(
        pset, dest, image_for=lambda p: img.image_tag(p, cfg), name="bundled", **kw
    )


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
                           "agent_network": t.config.agent.network_mode.value,
                           "test": str(t.paths.discovered_test_path),
                           "solve": str(t.paths.discovered_solve_path)}
        metrics = [m.model_dump(mode="json") for m in reg.datasets[0].metrics]
        print(json.dumps({"tasks": out, "metrics": metrics}))
        """,
        str(tmp_path / "ds"),
    )
    # the dataset's metric is the shipped rates script, run by Harbor with uv
    assert loaded["metrics"] == [{"type": "uv-script", "kwargs": {"script_path": "metric.py"}}]
    assert (tmp_path / "ds" / "metric.py").read_text() == guest.text("rates")
    job = json.loads((tmp_path / "ds" / "job.json").read_text())
    where = (tmp_path / "ds").resolve()
    assert job == {
        "datasets": [{"path": str(where)}],
        "metrics": [{"type": "uv-script", "kwargs": {"script_path": str(where / "metric.py")}}],
    }
    loaded = loaded["tasks"]
    assert sorted(loaded) == sorted(report.tasks)
    for s in snippets:
        entry = loaded[task_name(s)]
        assert entry["weight"] == s.weight
        assert entry["workdir"] == "/workspace"
        assert entry["agent_network"] == "no-network"
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
    first = tmp_path / "ds" / registry[0]["tasks"][0]["path"] / "task.toml"
    assert 'network_mode = "no-network"' in first.read_text()
    public = runner.invoke(
        cli, ["export", "harbor", "-o", str(tmp_path / "pub"), "--agent-network", "public"]
    )
    assert public.exit_code == 0, public.output
    first = tmp_path / "pub" / registry[0]["tasks"][0]["path"] / "task.toml"
    assert 'network_mode = "public"' in first.read_text()
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


def _verified(out: str) -> tuple[str, dict[str, Any] | None, dict[str, Any]]:
    """(exit status line, reward file, details) from the output of ``_SHOW``."""
    lines = out.split("\n")
    i = next(n for n, line in enumerate(lines) if line.startswith("rc="))
    reward = lines[i + 1].strip()
    return lines[i], json.loads(reward) if reward else None, json.loads("\n".join(lines[i + 2 :]))


_SHOW = (
    "echo rc=$?; cat /logs/verifier/reward.json 2>/dev/null; echo; "
    "cat /logs/verifier/reward-details.json"
)


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
        assert reward == {"reward": snippet.weight, "weight": snippet.weight, "passed": 1}
        assert details["tests"]
        assert all(t["status"] == "passed" for t in details["tests"])
        untouched = _docker_run(image, tests, script=f"bash /tests/test.sh; {_SHOW}")
        status, reward, details = _verified(untouched.stdout)
        assert (status, details["outcome"], details["reward"]) == ("rc=0", "failed", 0)
        assert reward == {"reward": 0, "weight": snippet.weight, "passed": 0}
        assert any(t["status"] in ("failed", "error") for t in details["tests"])
        # before verification, the agent's container has no tests and no reference copy
        seen = _docker_run(image, script="ls /tests 2>&1; find / -name '*_ref.py' 2>/dev/null")
        assert "No such file" in seen.stdout
        assert "_ref.py" not in seen.stdout.replace("No such file", "")
    finally:
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True, check=False)


def test_the_metric_gives_the_papers_rates_and_counts_missing_rewards() -> None:
    """The dataset's metric (Harbor hands it each trial's reward, None for none): the
    line-weighted and plain rates over the scored trials; a missing reward is counted, never 0."""
    rewards: list[dict[str, Any] | None] = [
        {"reward": 11, "weight": 11, "passed": 1},
        {"reward": 0, "weight": 7, "passed": 0},
        None,
        {"reward": 2, "weight": 2, "passed": 1},
    ]
    got = harbor_metric(rewards)
    assert got["scaled"] == pytest.approx(100 * 13 / 20)
    assert got["plain"] == pytest.approx(100 * 2 / 3)
    assert (got["scored"], got["passed"], got["weight"], got["infra_errors"]) == (3, 2, 20, 1)
    assert "infra_errors" not in harbor_metric(rewards[:2])  # no column of zeros
    assert harbor_metric([None]) == {  # nothing scored: no rate at all, not 0
        "scored": 0,
        "passed": 0,
        "weight": 0,
        "passed_weight": 0,
        "infra_errors": 1,
    }
    with pytest.raises(ValueError, match="rcb-env export"):
        harbor_metric([{"reward": 1.0}])  # another dataset's reward


def _trial(job: Path, name: str, rewards: dict[str, int] | None, details: dict[str, Any]) -> None:
    """A trial folder as Harbor 0.26 writes it (the fields rcb-env reads)."""
    (job / name / "verifier").mkdir(parents=True)
    (job / name / "verifier" / "reward-details.json").write_text(json.dumps(details))
    result = {
        "task_name": name.rsplit("__", 1)[0],
        "trial_name": name,
        "agent_info": {"name": "oracle", "model_info": None},
        "verifier_result": None if rewards is None else {"rewards": rewards},
        "reward_valid": rewards is not None,
        "exception_info": None if rewards else {"exception_type": "RewardFileNotFoundError"},
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:09Z",
        "config": {"task": {"path": name.rsplit("__", 1)[0]}},
    }
    (job / name / "result.json").write_text(json.dumps(result))


def test_import_results_reads_a_harbor_job_as_runs(tmp_path: Path) -> None:
    job = tmp_path / "job"
    _trial(
        job,
        "p__a__x1",
        {"reward": 5, "weight": 5, "passed": 1},
        {"snippet_id": "p/a", "weight": 5, "outcome": "passed"},
    )
    _trial(
        job,
        "p__b__x2",
        {"reward": 0, "weight": 3, "passed": 0},
        {"snippet_id": "p/b", "weight": 3, "outcome": "failed"},
    )
    _trial(
        job,
        "q__c__x3",
        None,
        {
            "snippet_id": "q/c",
            "weight": 4,
            "outcome": "infra_error",
            "kind": "missing_dependency",
            "detail": "import failed: z",
        },
    )
    (job / "result.json").write_text("{}")  # the job's own, not a trial
    res = CliRunner().invoke(
        cli, ["import-results", str(job), "--runs-dir", str(tmp_path / "runs")]
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "runs").iterdir()
    summary = summarize_run(run)
    assert summary.overall is not None
    assert summary.overall.scaled == pytest.approx(100 * 5 / 8)
    assert summary.overall.plain == pytest.approx(50.0)
    assert summary.infra_by_cause == {"grading: missing_dependency": 1}
    again = CliRunner().invoke(cli, ["import-results", str(tmp_path / "runs")])
    assert isinstance(again.exception, ConfigError)  # no trial results there


#: The four tasks the Harbor runs use: different line weights, two papers.
_PICKED = {
    "adamw-warmup": ("adamw step", "bias correction"),
    "scaled-attention": ("attend", "softmax"),
}


def _harbor_job(
    tasks: Path, label: str, agent: str, names: list[str], *, registry: bool = True
) -> Any:
    """``harbor run`` on ``names`` of the export in ``tasks`` so that the dataset's metric is
    used: through its registry, started in that folder, or (``registry=False``) as the folder
    (``-p``) with the export's job configuration (``-c job.json``), started elsewhere. Its jobs
    go to ``j-<label>`` beside ``tasks``. The process (not waited for)."""
    harbor, jobs = harbor_python(), tasks.parent / f"j-{label}"
    assert harbor is not None
    args = [str(harbor.parent / "harbor"), "run"]
    if registry:
        args += ["--registry-path", "registry.json", "-d", "bundled"]
    else:
        args += ["-p", str(tasks), "-c", str(tasks / "job.json")]
    args += ["-a", agent, "-e", "harbor_plain_docker:PlainDocker", "-n", "2"]
    for n in names:
        args += ["-i", n]
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "COLUMNS": "200",  # Harbor's results table, not cut to 80 columns
        # Harbor runs a dataset's metric.py with `uv run`: the one beside rcb-env's interpreter
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    return subprocess.Popen(
        [*args, "-o", str(jobs), "-y"],
        cwd=tasks if registry else jobs.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.docker
@pytest.mark.slow
def test_harbors_own_metric_equals_rcb_env_summary_of_the_same_trials(
    tmp_path: Path, docker_images: str, harbor: Path
) -> None:
    """``harbor run`` (Harbor's job, trials, agents, verifier and metric machinery) on exported
    tasks: the oracle; Harbor's ``nop`` agent, which leaves every TODO (all fail), run with
    ``-p DIR -c DIR/job.json`` from elsewhere; and the oracle on a mix: two passes, one failure
    (its solution left out) and one infrastructure failure, injected by making the hidden test
    file import a module the image lacks (the verifier's verdict is ``missing_dependency``, it
    writes no reward, Harbor records a verifier error). The other two go through the registry
    in the export's folder. Each time, the metric Harbor prints and stores equals ``rcb-env
    summary`` of the same trials (imported from the job folder), and the infrastructure
    failure is counted by both, never scored 0. The agent phase ran with the network off."""
    pset = load(bundled_root(), papers=set(_PICKED))
    snippets = {s.name: s for p in pset.papers for s in p.snippets if s.name in _PICKED[p.id]}
    names = {k: task_name(s) for k, s in snippets.items()}
    clean, mixed = tmp_path / "clean", tmp_path / "mixed"
    _export(clean, set(_PICKED))
    _export(mixed, set(_PICKED))
    failing, broken = mixed / names["attend"], mixed / names["softmax"]
    (failing / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue  # the TODO stays\n")
    hidden = broken / "tests" / "paper" / pset.paper("scaled-attention").test_file
    hidden.write_text("import rcb_env_injected_missing_module\n" + hidden.read_text())

    t0 = time.monotonic()
    jobs = {
        "oracle": _harbor_job(clean, "oracle", "oracle", [names["adamw step"], names["attend"]]),
        "nop": _harbor_job(clean, "nop", "nop", [names["bias correction"], names["attend"]],
                           registry=False),
        "mix": _harbor_job(mixed, "mix", "oracle", list(names.values())),
    }  # fmt: skip
    printed = {}
    for label, proc in jobs.items():
        printed[label], _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, printed[label][-3000:]
    elapsed = time.monotonic() - t0

    w = {k: s.weight for k, s in snippets.items()}
    expected = {  # (scaled, plain, scored, infra) by the paper's formulas
        "oracle": (100.0, 100.0, 2, 0),
        "nop": (0.0, 0.0, 2, 0),
        "mix": (
            100 * (w["adamw step"] + w["bias correction"])
            / (w["adamw step"] + w["bias correction"] + w["attend"]),
            100 * 2 / 3, 3, 1,
        ),
    }  # fmt: skip
    for label in jobs:
        (job,) = (tmp_path / f"j-{label}").iterdir()
        (stats,) = json.loads((job / "result.json").read_text())["stats"]["evals"].values()
        (metric,) = stats["metrics"]  # the dataset's metric.py, and only it
        tasks = mixed if label == "mix" else clean
        (run,) = import_harbor_job(job, tmp_path / "runs", tasks=tasks)
        summary = summarize_run(run.run_dir)
        assert summary.overall is not None
        ours = (summary.overall.scaled, summary.overall.plain, summary.overall.snippets,
                summary.infra_errors)  # fmt: skip
        theirs = (metric["scaled"], metric["plain"], metric["scored"], stats["n_errors"])
        assert ours == pytest.approx(theirs), (label, ours, theirs)
        assert ours == pytest.approx(expected[label]), (label, ours)
        # what Harbor prints: its results table with the dataset's metric
        assert f"{metric['scaled']:.3f}" in printed[label]
        assert "Scaled" in printed[label]
        # Harbor switched the network off for each agent phase (and back for verification)
        for trial in job.glob("*/result.json"):
            log = (trial.parent / "network-policies.log").read_text().split()
            assert log == ["no-network", "public"], log
    mix_job = next((tmp_path / "j-mix").iterdir())
    infra = [
        json.loads((t.parent / "verifier" / "reward-details.json").read_text())
        for t in mix_job.glob("*/result.json")
        if not json.loads(t.read_text())["reward_valid"]
    ]
    assert [(d["outcome"], d["kind"], d["reward"]) for d in infra] == [
        ("infra_error", "missing_dependency", None)
    ]
    assert all(d["tests"] for d in infra)  # the per-test verdicts the verifier saw
    assert elapsed < 300


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
