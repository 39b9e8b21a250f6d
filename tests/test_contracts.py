"""The four contracts, exercised from outside the package: a task source and a sandbox backend
written here (a layout and a backend rcb-env has never seen), registered, and run through the
runner; the typed episode outcome; agents outside the environment (no import cycle, no SDKs).

Everything here needs nothing installed beyond the package: the fast tier.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import rcb_env
from rcb_env import config
from rcb_env.episode import Budgets, EnvConfig, RcbEnv
from rcb_env.episode.outcome import EpisodeOutcome, EpisodeStatus, StopReason
from rcb_env.errors import SandboxError
from rcb_env.grading import GradingConfig, expected_tests
from rcb_env.results import read_records
from rcb_env.runner import BudgetConfig, EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig, SandboxFactory, register_backend
from rcb_env.sandbox.conformance import check_backend
from rcb_env.sandbox.workspace import extract_region
from rcb_env.task.loader import slugify, walk_files
from rcb_env.task.models import AnnotatedFile, Paper, PaperMeta, Pset, Snippet
from rcb_env.task.source import TaskSource, TaskStatement, register_source
from rcb_env.testing import FakeBackend, ScriptedAgent
from tests.conftest import math_files, write_paper, write_pset

REPO = Path(__file__).resolve().parent.parent

# --- a toy layout: regions named in a JSON manifest by line numbers, no markers in the code -----

TOY_CODE = """\
def square(x):
    y = x * x
    return y


def cube(x):
    return x * x * x
"""

TOY_TEST = """\
import unittest

from shapes import cube, square


class TestShapes(unittest.TestCase):
    def test_square(self):
        self.assertEqual(square(7), 49)

    def test_cube(self):
        self.assertEqual(cube(3), 27)


if __name__ == "__main__":
    unittest.main()
"""


def placeholder_for(name: str, indent: str) -> str:
    return f"{indent}...  # FILL IN: {name}\n"


class ToySource(TaskSource):
    """``toy.json`` = {"papers": [{"id", "title", "file", "regions": [{"name", "start",
    "end"}]}]}; each paper folder has ``notes.md`` (the paper) and ``check.py`` (the tests)."""

    name = "toy"

    @classmethod
    def detect(cls, root: Path) -> bool:
        return (root / "toy.json").is_file()

    def load(
        self, root: Path, *, papers: set[str] | None = None, overlay: Path | None = None
    ) -> Pset:
        manifest = json.loads((root / "toy.json").read_text())
        loaded = []
        for entry in manifest["papers"]:
            if papers is not None and entry["id"] not in papers:
                continue
            folder = root / entry["id"]
            text = (folder / entry["file"]).read_text()
            lines = text.splitlines(keepends=True)
            snippets = []
            for region in entry["regions"]:
                body = "".join(lines[region["start"] - 1 : region["end"]])
                indent = body[: len(body) - len(body.lstrip())]
                masked = (
                    "".join(lines[: region["start"] - 1])
                    + placeholder_for(region["name"], indent)
                    + "".join(lines[region["end"] :])
                )
                snippets.append(
                    Snippet(
                        paper_id=entry["id"],
                        name=region["name"],
                        slug=slugify(region["name"]),
                        file=entry["file"],
                        start_line=region["start"],
                        end_line=region["end"],
                        indent=indent,
                        depth=0,
                        parent=None,
                        children=(),
                        weight=region["end"] - region["start"] + 1,
                        distinct_lines=region["end"] - region["start"] + 1,
                        reference_body=body,
                        masked_text=masked,
                    )
                )
            loaded.append(
                Paper(
                    meta=PaperMeta(id=entry["id"], title=entry["title"]),
                    source=self.name,
                    root=folder,
                    slug=slugify(entry["id"]),
                    paper_file="notes.md",
                    test_file="check.py",
                    annotated_files=(AnnotatedFile(path=entry["file"], text=text),),
                    hidden_patterns=("check.py",),
                    hidden_paths=("check.py",),
                    snippets=tuple(snippets),
                )
            )
        return Pset(root=root, papers=tuple(loaded))

    def write_workspace(self, paper: Paper, snippet: Snippet, dest: Path) -> None:
        for rel in walk_files(paper.root):
            if rel in paper.hidden_paths:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            text = (paper.root / rel).read_text()
            target.write_text(snippet.masked_text if rel == snippet.file else text)

    def write_grading_copy(self, paper: Paper, snippet: Snippet, body: str, dest: Path) -> None:
        for rel in walk_files(paper.root):
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text((paper.root / rel).read_text())
        lines = paper.file_text(snippet.file).splitlines(keepends=True)
        spliced = [*lines[: snippet.start_line - 1], body, *lines[snippet.end_line :]]
        (dest / snippet.file).write_text("".join(spliced))

    def extract_body(self, paper: Paper, snippet: Snippet, edited: str) -> tuple[str, bool]:
        marker = [placeholder_for(snippet.name, snippet.indent)]
        return extract_region(snippet.masked_text, marker, edited)

    def expected_tests(self, paper: Paper) -> tuple[str, ...]:
        return expected_tests((paper.root / paper.test_file).read_text())

    def statement(self, paper: Paper, snippet: Snippet) -> TaskStatement:
        return TaskStatement(
            title=paper.meta.title or paper.id,
            file=snippet.file,
            placeholder=placeholder_for(snippet.name, snippet.indent),
            indent=snippet.indent,
            intro="fill in one region of the toy library of",
            instructions="Replace the FILL IN line; call submit when done.",
            paper_file=paper.paper_file,
            paper_is_markdown=True,
        )


class ToyBackend(FakeBackend):
    """A backend written outside rcb-env, built from the shipped fake sandbox."""

    name = "toy"
    log = []  # noqa: RUF012 - this backend's own command log


register_source(ToySource)
register_backend(ToyBackend)


@pytest.fixture
def toy_root(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks" / "shapes"
    folder.mkdir(parents=True)
    (folder / "shapes.py").write_text(TOY_CODE)
    (folder / "check.py").write_text(TOY_TEST)
    (folder / "notes.md").write_text("# Shapes\n\nA square is x times x.\n")
    manifest = {
        "papers": [
            {
                "id": "shapes",
                "title": "Shapes",
                "file": "shapes.py",
                "regions": [
                    {"name": "square body", "start": 2, "end": 3},
                    {"name": "cube body", "start": 7, "end": 7},
                ],
            }
        ]
    }
    (tmp_path / "tasks" / "toy.json").write_text(json.dumps(manifest))
    return tmp_path / "tasks"


def _eval(pset: Pset, agent: str, run_dir: Path, **budgets: Any) -> list[Any]:
    cfg = EvalConfig(
        agent=agent,
        sandbox=SandboxConfig(backend="toy"),
        grading=GradingConfig(python=Path(sys.executable), timeout_s=30),
        budgets=BudgetConfig(**budgets),
    )
    run_eval(pset, cfg, run_dir, infra_retries=0)
    return read_records(run_dir / "episodes.jsonl")


def test_a_new_layout_and_a_new_backend_run_through_eval(toy_root: Path, tmp_path: Path) -> None:
    pset = rcb_env.load(str(toy_root))  # a str path; the layout is detected
    assert [p.source for p in pset.papers] == ["toy"]
    assert [s.weight for s in pset.snippets] == [2, 1]

    oracle = _eval(pset, "oracle", tmp_path / "oracle")
    assert [(r.status, r.reason, r.passed, r.reward) for r in oracle] == [
        ("completed", "submit", True, 2.0),
        ("completed", "submit", True, 1.0),
    ]
    assert all(r.grade is not None and len(r.grade.tests) == 2 for r in oracle)
    # the agent saw the toy layout's statement and none of its hidden test
    assert "FILL IN: square body" in oracle[0].initial_observation
    assert "check.py" not in oracle[0].initial_observation

    null = _eval(pset, "null", tmp_path / "null")
    assert [(r.status, r.passed, r.reward) for r in null] == [
        ("completed", False, 0.0),
        ("completed", False, 0.0),
    ]


def test_the_shipped_conformance_suite_passes_on_the_toy_backend() -> None:
    report = check_backend(SandboxConfig(backend="toy", python=config.task_python()))
    assert report.ok, report.render()
    assert len(report.results) >= 8  # every contract check ran (no isolation checks: not isolating)


# --- the typed outcome ---------------------------------------------------------------------------


@pytest.fixture
def maths(tmp_path: Path) -> Paper:
    write_pset(tmp_path, [write_paper(tmp_path, "maths", math_files())])
    return rcb_env.load(tmp_path).papers[0]


@pytest.fixture
def toy_factory() -> Iterator[SandboxFactory]:
    f = SandboxFactory(SandboxConfig(backend="toy"))
    yield f
    f.close()
    ToyBackend.inject = None


def _env(paper: Paper, factory: SandboxFactory, **budgets: Any) -> Budgets:
    inner = RcbEnv(
        paper,
        paper.snippet("variance"),
        EnvConfig(),
        grading_config=GradingConfig(python=Path(sys.executable), timeout_s=30),
        factory=factory,
    )
    return Budgets(inner, **budgets)


def test_infrastructure_failure_and_budget_cut_are_told_apart(
    maths: Paper, toy_factory: SandboxFactory
) -> None:
    env = _env(maths, toy_factory, max_steps=1)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step({"tool": "run_command", "command": "true"})
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert (info["status"], info["reason"]) == ("truncated", "budget_steps")
    outcome = info["outcome"]
    assert isinstance(outcome, EpisodeOutcome)
    assert outcome.reason is StopReason.BUDGET_STEPS
    assert outcome.scored
    assert "infra_error" not in info

    ToyBackend.inject = lambda cmd: SandboxError("the sandbox died") if "boom" in cmd else None
    env = _env(maths, toy_factory, max_steps=5)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step({"tool": "run_command", "command": "boom"})
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert (info["status"], info["reason"]) == ("infra_error", "infra_error")
    assert info["infra_error"]["stage"] == "sandbox"
    assert info["outcome"].status is EpisodeStatus.INFRA_ERROR
    assert not info["outcome"].scored
    assert info["passed"] is None
    with pytest.raises(gym.error.ResetNeeded):
        env.step({"tool": "submit"})
    env.close()


def test_records_tell_infrastructure_from_budget(
    maths: Paper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pset = Pset(root=tmp_path, papers=(maths,))
    agent = "tests.test_contracts:CommandAgent"  # runs a command, then submits
    budget = _eval(pset, agent, tmp_path / "budget", max_steps=1)
    assert {(r.status, r.reason) for r in budget} == {("truncated", "budget_steps")}
    assert all(r.passed is False and r.infra_error is None for r in budget)
    monkeypatch.setattr(ToyBackend, "inject", lambda _cmd: SandboxError("gone"))
    broken = _eval(pset, agent, tmp_path / "broken")
    assert {(r.status, r.reason, r.passed) for r in broken} == {
        ("infra_error", "infra_error", None)
    }
    assert all(r.infra_error is not None and r.infra_error.stage == "sandbox" for r in broken)


class CommandAgent(ScriptedAgent):
    """Runs one command, then submits."""

    def __init__(self) -> None:
        super().__init__([{"tool": "run_command", "command": "echo hi"}])


def test_misuse_raises_gymnasiums_errors(maths: Paper, toy_factory: SandboxFactory) -> None:
    env = _env(maths, toy_factory).unwrapped
    with pytest.raises(gym.error.ResetNeeded, match="reset"):
        env.step({"tool": "list_files"})
    env.close()


def test_tool_data_cannot_overwrite_the_environments_info(
    maths: Paper, toy_factory: SandboxFactory
) -> None:
    env = _env(maths, toy_factory)
    _, info = env.reset(seed=0)
    assert info["task"]["file"] == "stats.py"  # the statement's structured fields, at reset
    assert info["task"]["placeholder"] == info["todo_block"]
    _, _, _, _, info = env.step({"tool": "run_command", "command": "exit 7"})
    assert info["tool"] == {"ok": False, "exit_code": 7, "timed_out": False}
    assert info["snippet_id"] == "maths/variance"
    assert "exit_code" not in info
    env.close()


# --- agents outside the environment --------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_environment_never_imports_the_agents_package() -> None:
    offenders = {
        str(p.relative_to(REPO)): sorted(m for m in _imports(p) if m.split(".")[0] == "rcb_agents")
        for p in (REPO / "rcb_env").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_environment_and_bundled_eval_work_without_the_llm_sdks(tmp_path: Path) -> None:
    """A fresh interpreter in which openai and anthropic cannot be imported (as in a venv
    without them): import, the gym ids, a bundled oracle eval (local backend) all work."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["openai"] = None  # import openai -> ImportError, as when not installed
        sys.modules["anthropic"] = None
        from pathlib import Path
        import gymnasium as gym
        import rcb_env
        from rcb_env.grading import GradingConfig
        from rcb_env.runner import EvalConfig, run_eval
        from rcb_env.sandbox import SandboxConfig

        assert "rcb/adamw-warmup.bias_correction-v0" in gym.registry
        python = Path({str(config.task_python())!r})
        env = gym.make(
            "rcb/adamw-warmup.bias_correction-v0",
            sandbox_config=SandboxConfig(backend="local", python=python),
            grading_config=GradingConfig(python=python),
        )
        obs, info = env.reset(seed=0)
        _, reward, terminated, _, _ = env.step({{"tool": "submit"}})
        assert (reward, terminated) == (0.0, True)
        env.close()
        pset = rcb_env.load(rcb_env.bundled_root(), papers={{"adamw-warmup"}})
        cfg = EvalConfig(
            agent="oracle",
            sandbox=SandboxConfig(backend="local", python=python),
            grading=GradingConfig(python=python),
        )
        summary = run_eval(pset, cfg, Path({str(tmp_path / "run")!r}))
        print(summary.overall.snippets, int(summary.overall.passed))
        assert "openai" not in [m for m, v in sys.modules.items() if v is not None]
        """
    )
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    snippets, passed = run.stdout.split()[-2:]
    assert snippets == passed != "0"


def test_the_llm_sdks_are_an_extra_not_a_requirement() -> None:
    from importlib.metadata import requires

    reqs = requires("rcb-env") or []
    for sdk in ("openai", "anthropic"):
        mine = [r for r in reqs if r.split(">")[0].split("=")[0].strip() == sdk]
        assert mine, f"{sdk} is not declared at all"
        assert all(r.replace('"', "'").endswith("extra == 'agents'") for r in mine), mine


def test_check_env_passes_on_the_fake_backend() -> None:
    """Gymnasium's own checker, in the fast tier (no bubblewrap needed)."""
    from gymnasium.utils.env_checker import check_env

    from rcb_env.testing import FakeBackend

    register_backend(FakeBackend)
    python = config.task_python()
    env = gym.make(
        "rcb/adamw-warmup.bias_correction-v0",
        sandbox_config=SandboxConfig(backend="fake", python=python),
        grading_config=GradingConfig(python=python),
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()
