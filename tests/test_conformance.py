"""Every sandbox backend behaves the same: one suite, parametrised over local, bwrap and docker.

`local` has no isolation by design, so the isolation checks are skipped for it, and only them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rcb_agents import NullAgent, OracleAgent

from rcb_env import config
from rcb_env.grading import GradingConfig
from rcb_env.runner import EvalConfig, run_episode
from rcb_env.sandbox import Limits, Sandbox, SandboxConfig, SandboxFactory
from rcb_env.task import Paper, bundled_root, load
from tests.conftest import live_processes

pytestmark = pytest.mark.slow
BACKENDS = ["local", "bwrap", "docker"]
ISOLATING = ["bwrap", "docker"]


@pytest.fixture(scope="module")
def paper() -> Paper:
    return load(bundled_root()).paper("adamw-warmup")


def backend_config(name: str, request: pytest.FixtureRequest, **kw: Any) -> SandboxConfig:
    if name == "bwrap":
        request.getfixturevalue("require_bwrap")
    if name == "docker":
        base = request.getfixturevalue("docker_images")
        return SandboxConfig(backend="docker", docker_base=base, **kw)
    return SandboxConfig(backend=name, python=config.task_python(), **kw)


@pytest.fixture(params=BACKENDS)
def factory(request: pytest.FixtureRequest) -> Iterator[SandboxFactory]:
    f = SandboxFactory(backend_config(request.param, request))
    yield f
    f.close()


@pytest.fixture(params=ISOLATING)
def isolating(request: pytest.FixtureRequest) -> Iterator[SandboxFactory]:
    f = SandboxFactory(backend_config(request.param, request))
    yield f
    f.close()


@pytest.fixture
def sandbox(factory: SandboxFactory, paper: Paper) -> Iterator[Sandbox]:
    sb = factory.create(paper, paper.snippet("bias correction"))
    yield sb
    sb.close()


@pytest.fixture
def isolated(isolating: SandboxFactory, paper: Paper) -> Iterator[Sandbox]:
    sb = isolating.create(paper, paper.snippet("bias correction"))
    yield sb
    sb.close()


def test_exit_codes_and_streams(sandbox: Sandbox) -> None:
    r = sandbox.exec("echo out; echo err >&2; false")
    assert (r.exit_code, r.stdout, r.stderr) == (1, "out\n", "err\n")
    assert sandbox.exec("(exit 3)").exit_code == 3
    r = sandbox.exec("exit 4")
    assert r.exit_code == 4
    assert "new one was started" in r.stderr
    assert sandbox.exec("echo still here").stdout == "still here\n"


def test_shell_state_persists(sandbox: Sandbox) -> None:
    sandbox.exec("export RCB_X=41; cd /tmp; y=1")
    assert sandbox.exec("echo $((RCB_X + y)); pwd").stdout.split() == ["42", "/tmp"]


def test_timeout_kills_the_whole_process_tree(sandbox: Sandbox) -> None:
    r = sandbox.exec("sleep 321.5 & (sleep 322.5 &) ; sleep 323.5", timeout_s=1)
    assert r.timed_out
    assert r.exit_code is None
    for marker in ("321.5", "322.5", "323.5"):
        assert live_processes(f"sleep\x00{marker}") == [], marker
    assert sandbox.exec("echo ok").stdout == "ok\n"


def test_file_round_trips(sandbox: Sandbox) -> None:
    text = "naïve = 'ünïcode'\nno final newline"
    sandbox.write_file("sub/new.py", text)
    assert sandbox.exec("cat sub/new.py").stdout == text
    sandbox.exec("printf 'a\\nb' > made.txt")
    assert sandbox.read_file("made.txt") == "a\nb"
    assert sandbox.changed_files() == ["made.txt", "sub/new.py"]


def test_hidden_files_are_absent(sandbox: Sandbox) -> None:
    listing = sandbox.exec("ls -a").stdout.split()
    assert "paper2code_test.py" not in listing
    assert not any(n.endswith("_ref.py") for n in listing)
    assert sorted(sandbox.list_files()) == [
        "optim.py",
        "paper2code_paper.tex",
        "params.py",
        "schedule.py",
    ]


def test_reset_restores_the_pristine_workspace(sandbox: Sandbox) -> None:
    before = sandbox.read_file("optim.py")
    sandbox.exec("echo junk >> optim.py; touch extra.txt; (sleep 456.5 &)")
    sandbox.reset()
    assert sandbox.read_file("optim.py") == before
    assert sandbox.changed_files() == []
    assert live_processes("sleep\x00456.5") == []
    assert sandbox.exec("ls extra.txt").exit_code != 0


def test_no_network(isolated: Sandbox) -> None:
    script = (
        "import socket\n"
        "print(open('/proc/net/dev').read().count(':'))\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
        "except OSError as e:\n"
        "    print('blocked', e.errno)\n"
    )
    isolated.write_file("net.py", script)
    out = isolated.exec("python net.py").stdout.split()
    assert out[0] == "1"  # only lo
    assert out[1] == "blocked"


def test_system_paths_are_read_only(isolated: Sandbox) -> None:
    r = isolated.exec("touch /usr/rcb-evil /etc/rcb-evil /rcb-evil 2>&1; echo done")
    assert r.stdout.count("Read-only file system") == 3
    assert not Path("/usr/rcb-evil").exists()


def test_hidden_files_unreachable_anywhere(isolated: Sandbox, paper: Paper) -> None:
    r = isolated.exec(f"find / -name optim_ref.py 2>/dev/null; cat {paper.root}/optim_ref.py")
    assert r.stdout == ""
    assert isolated.exec("id -u").stdout.strip() != "0"


def test_memory_limit(request: pytest.FixtureRequest, paper: Paper) -> None:
    for name in ISOLATING:
        f = SandboxFactory(backend_config(name, request, limits=Limits(memory_mb=300)))
        try:
            with f.create(paper, paper.snippet("bias correction")) as sb:
                hog = "b = [bytearray(50 * 2**20) for _ in range(40)]; print('survived')"
                r = sb.exec(f'python -c "{hog}"')
                assert "survived" not in r.stdout, name
                assert r.exit_code != 0, name
                assert sb.exec("echo ok").stdout == "ok\n", name
        finally:
            f.close()


def _edit_and_diff(f: SandboxFactory, paper: Paper) -> tuple[str, list[str]]:
    with f.create(paper, paper.snippet("bias correction")) as sb:
        text = sb.read_file("optim.py")
        sb.write_file(
            "optim.py", text.replace("import numpy as np", "import numpy as np  # edited")
        )
        sb.exec("printf 'x = 1\\n' > added.py; rm schedule.py")
        return sb.diff(), sb.changed_files()


def _available(request: pytest.FixtureRequest) -> dict[str, SandboxConfig]:
    return {name: backend_config(name, request) for name in BACKENDS}


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
    grade["stderr"] = _VOLATILE.sub(r"Ran \1 tests in Xs", grade["stderr"])
    return data


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

    from rcb_env.sandbox import local

    monkeypatch.setattr(local, "_warned", False)
    f = SandboxFactory(SandboxConfig(backend="local", python=config.task_python()))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f.create(paper, paper.snippets[0]).close()
        assert any("NO isolation" in str(w.message) for w in caught)
    finally:
        f.close()


def test_a_closed_sandbox_refuses_commands(factory: SandboxFactory, paper: Paper) -> None:
    from rcb_env.errors import SandboxError

    sb = factory.create(paper, paper.snippets[0])
    sb.close()
    with pytest.raises(SandboxError, match="closed"):
        sb.exec("true")
