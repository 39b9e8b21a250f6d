"""Every sandbox backend behaves the same: the shipped suite (rcb_env.sandbox.conformance),
check by check, over local, bwrap and docker; plus cross-backend identity of patches and records.

`local` has no isolation by design, so the isolation checks are not run for it, and only them.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from rcb_agents import NullAgent, OracleAgent

from rcb_env import config
from rcb_env.grading import GradingConfig
from rcb_env.runner import EvalConfig, run_episode
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.sandbox.conformance import CHECKS, ISOLATION_CHECKS, ConformanceFailure, Context
from rcb_env.task import Paper, bundled_root, load

_BWRAP = pytest.param("bwrap", marks=pytest.mark.bwrap)
_DOCKER = pytest.param("docker", marks=pytest.mark.docker)
BACKENDS = ["local", _BWRAP, _DOCKER]
ISOLATING = [_BWRAP, _DOCKER]


@pytest.fixture(scope="module")
def paper() -> Paper:
    return load(bundled_root()).paper("adamw-warmup")


def backend_config(name: str, request: pytest.FixtureRequest, **kw: Any) -> SandboxConfig:
    if name == "bwrap":
        request.getfixturevalue("require_bwrap")
    if name == "docker":
        base = request.getfixturevalue("docker_images")
        return SandboxConfig(backend="docker", options={"docker_base": base}, **kw)
    return SandboxConfig(backend=name, python=config.task_python(), **kw)


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_contract(backend: str, check: str, request: pytest.FixtureRequest, paper: Paper) -> None:
    """The shipped suite (rcb_env.sandbox.conformance), check by check, on every backend."""
    ctx = Context(config=backend_config(backend, request), paper=paper, isolating=False)
    CHECKS[check](ctx)


@pytest.mark.parametrize("check", sorted(ISOLATION_CHECKS))
@pytest.mark.parametrize("backend", ISOLATING)
def test_isolation(backend: str, check: str, request: pytest.FixtureRequest, paper: Paper) -> None:
    ctx = Context(config=backend_config(backend, request), paper=paper, isolating=True)
    ISOLATION_CHECKS[check](ctx)


@pytest.mark.slow
def test_the_suite_fails_a_backend_that_breaks_the_contract(paper: Paper) -> None:
    """The checks can fail: a backend that loses shell state, shows a hidden file and ignores
    timeouts is caught by the checks for each."""
    cfg = SandboxConfig(backend="local", python=config.task_python())
    ctx = Context(config=cfg, paper=paper, isolating=False)
    leaky = paper.model_copy(update={"hidden_paths": (*paper.hidden_paths, "optim.py")})
    with pytest.raises(ConformanceFailure, match=r"optim\.py is in the workspace"):
        CHECKS["hidden_files_are_absent"](Context(config=cfg, paper=leaky, isolating=False))
    with pytest.raises(ConformanceFailure, match="2 GB fit"):
        ISOLATION_CHECKS["memory_limit"](ctx)  # local has no limits
    with pytest.raises(ConformanceFailure, match="reachable"):
        ISOLATION_CHECKS["hidden_files_unreachable_anywhere"](ctx)


def _edit_and_diff(f: SandboxFactory, paper: Paper) -> tuple[str, list[str]]:
    with f.create(paper, paper.snippet("bias correction")) as sb:
        text = sb.read_file("optim.py")
        sb.write_file(
            "optim.py", text.replace("import numpy as np", "import numpy as np  # edited")
        )
        sb.exec("printf 'x = 1\\n' > added.py; rm schedule.py")
        return sb.diff(), sb.changed_files()


def _available(request: pytest.FixtureRequest) -> dict[str, SandboxConfig]:
    return {name: backend_config(name, request) for name in ("local", "bwrap", "docker")}


@pytest.mark.bwrap
@pytest.mark.docker
def test_patch_extraction_is_identical_across_backends(
    request: pytest.FixtureRequest, paper: Paper
) -> None:
    results = {}
    for name, cfg in _available(request).items():
        f = SandboxFactory(cfg)
        try:
            results[name] = _edit_and_diff(f, paper)
        finally:
            f.close()
    first = results["local"]
    assert "+import numpy as np  # edited" in first[0]
    assert first[1] == ["added.py", "optim.py", "schedule.py"]
    assert all(r == first for r in results.values())


_VOLATILE = re.compile(r"Ran (\d+) tests? in [0-9.]+s")


def _normalised(record: Any) -> dict[str, Any]:
    data: dict[str, Any] = record.model_dump(mode="json")
    for key in ("run_id", "episode_id", "started_at", "duration_s", "config"):
        data.pop(key)
    for step in data["steps"]:
        step.pop("duration_s")
    grade = data["grade"]
    grade.pop("duration_s")
    grade.pop("grading_path")  # warm on bwrap and docker, cold on local: the verdict is the same
    grade["stderr"] = _VOLATILE.sub(r"Ran \1 tests in Xs", grade["stderr"])
    return data


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.docker
def test_oracle_and_null_records_are_identical_across_backends(
    request: pytest.FixtureRequest, paper: Paper
) -> None:
    pset = load(bundled_root())
    answers = {s.id: s.reference_body for s in pset.snippets}
    snippets = [paper.snippet("bias correction"), paper.snippet("warmup cosine schedule")]
    records: dict[str, list[dict[str, Any]]] = {}
    for name, cfg in _available(request).items():
        f = SandboxFactory(cfg)
        eval_cfg = EvalConfig(
            agent="oracle", sandbox=cfg, grading=GradingConfig(python=config.task_python())
        )
        try:
            records[name] = [
                _normalised(run_episode(paper, s, 0, agent, eval_cfg, f, "run"))
                for s in snippets
                for agent in (OracleAgent(answers), NullAgent())
            ]
        finally:
            f.close()
    oracle_passed = [r["passed"] for r in records["bwrap"]]
    assert oracle_passed == [True, False, True, False]
    assert records["bwrap"] == records["local"]
    assert records["docker"] == records["bwrap"]


def test_local_backend_warns_loudly(monkeypatch: pytest.MonkeyPatch, paper: Paper) -> None:
    import warnings

    from rcb_env.sandbox.backends import local

    monkeypatch.setattr(local, "_warned", False)
    f = SandboxFactory(SandboxConfig(backend="local", python=config.task_python()))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f.create(paper, paper.snippets[0]).close()
        assert any("NO isolation" in str(w.message) for w in caught)
    finally:
        f.close()


def test_agent_programs_are_optional_for_a_backend(paper: Paper) -> None:
    """A backend without agent programs (local: the base class's ``run_program``) passes the
    agent-program check, and refuses a program with a clear error: agent CLIs are then not
    available on it, and an outside backend written before them still conforms."""
    from rcb_env.errors import SandboxError
    from rcb_env.sandbox.base import Program

    cfg = SandboxConfig(backend="local", python=config.task_python())
    ISOLATION_CHECKS["agent_programs_run_isolated"](
        Context(config=cfg, paper=paper, isolating=True)
    )
    f = SandboxFactory(cfg)
    try:
        with (
            f.create(paper, paper.snippet("bias correction")) as sb,
            pytest.raises(SandboxError, match="cannot run an agent program"),
        ):
            sb.run_program(Program(argv=("true",)))
    finally:
        f.close()
