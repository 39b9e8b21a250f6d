"""Sandboxes with the real bwrap: isolation, limits, persistence, reset, cleanup."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rcb_env.sandbox import Limits, Sandbox, SandboxConfig, SandboxFactory
from rcb_env.sandbox.backends.bwrap import BwrapSandbox
from rcb_env.sandbox.cgroups import CGROUP_PARENT, CGROUP_ROOT
from rcb_env.sandbox.cgroups import sweep as sweep_cgroups
from rcb_env.task import Paper, load
from tests.conftest import live_processes, math_files, write_paper, write_pset


@pytest.fixture
def paper(tmp_path: Path) -> Paper:
    write_pset(tmp_path / "pset", [write_paper(tmp_path / "pset", "maths", math_files())])
    return load(tmp_path / "pset").papers[0]


@pytest.fixture
def factory(bwrap_config: SandboxConfig) -> Iterator[SandboxFactory]:
    f = SandboxFactory(bwrap_config)  # default scratch: tmpfs, reachable by the sandbox user
    yield f
    f.close()


@pytest.fixture
def sandbox(factory: SandboxFactory, paper: Paper) -> Iterator[Sandbox]:
    sb = factory.create(paper, paper.snippet("variance"))
    yield sb
    sb.close()


def test_runs_as_unprivileged_user_in_workspace_with_persistent_state(sandbox: Sandbox) -> None:
    r = sandbox.exec("id -u; pwd; export FOO=bar; cd /tmp")
    uid, cwd = r.stdout.split()
    assert uid != "0"
    assert cwd == "/workspace"
    assert sandbox.exec("echo $FOO; pwd").stdout.split() == ["bar", "/tmp"]


def test_hidden_files_cannot_be_reached_from_the_shell(sandbox: Sandbox, paper: Paper) -> None:
    assert sandbox.exec("ls").stdout.split() == ["paper2code_paper.tex", "stats.py"]
    attempts = [
        "cat ../paper2code_test.py",
        "cat ../stats_ref.py",
        f"cat {paper.root}/stats_ref.py",
        "cat /proc/self/cwd/../stats_ref.py",
        "cat /proc/1/root/stats_ref.py",
        f"ln -s {paper.root}/stats_ref.py leak.py && cat leak.py",
        "find / -name 'stats_ref.py' -o -name 'paper2code_test.py' 2>/dev/null | grep . ",
    ]
    for command in attempts:
        r = sandbox.exec(command)
        assert "mean_ref" not in r.stdout, command
        assert "def variance" not in r.stdout, command
        assert r.exit_code != 0, command
    with pytest.raises(ValueError, match="outside the workspace"):
        sandbox.read_file("leak.py")


def test_no_network(sandbox: Sandbox) -> None:
    script = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=2)\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
        "print(open('/proc/net/dev').read().count(':'))\n"
    )
    sandbox.write_file("net.py", script)
    out = sandbox.exec("python net.py").stdout.split()
    assert out[0] in {"ConnectionRefusedError", "OSError"}
    assert out[1] == "1"  # only lo


def test_system_paths_are_read_only(sandbox: Sandbox) -> None:
    r = sandbox.exec("touch /usr/evil 2>&1; touch /etc/evil 2>&1; echo done")
    assert "Read-only file system" in r.stdout
    assert not Path("/usr/evil").exists()


def test_command_timeout_kills_and_restarts_the_shell(sandbox: Sandbox) -> None:
    start = time.monotonic()
    r = sandbox.exec("sleep 600", timeout_s=1)
    assert r.timed_out
    assert time.monotonic() - start < 15
    assert live_processes("sleep 600") == []
    assert sandbox.exec("echo alive").stdout.strip() == "alive"


def test_memory_limit_kills_or_refuses(paper: Paper, bwrap_config: SandboxConfig) -> None:
    cfg = bwrap_config.model_copy(update={"limits": Limits(memory_mb=300)})
    f = SandboxFactory(cfg)
    with f.create(paper, paper.snippet("variance")) as sb:
        r = sb.exec(
            "python -c \"b = [bytearray(50 * 2**20) for _ in range(40)]; print('survived')\""
        )
        assert "survived" not in r.stdout
        assert r.exit_code != 0
        assert sb.exec("echo ok").stdout.strip() == "ok"
    f.close()


@pytest.mark.slow
def test_process_limit_stops_fork_bombs(paper: Paper, bwrap_config: SandboxConfig) -> None:
    cfg = bwrap_config.model_copy(update={"limits": Limits(pids=40)})
    f = SandboxFactory(cfg)
    # A process that starts 200 more without waiting (the shell's own fork would retry with
    # back-off for half a minute before it gives up; the kernel's refusal is the same).
    bomb = (
        "import subprocess\n"
        "for i in range(200):\n"
        "    try:\n"
        "        subprocess.Popen(['sleep', '77.5'], stdout=subprocess.DEVNULL)\n"
        "    except OSError as e:\n"
        "        print('started', i, 'then', e)\n"
        "        break\n"
    )
    with f.create(paper, paper.snippet("variance")) as sb:
        r = sb.exec(f"python -c {shlex.quote(bomb)}", timeout_s=30)
        started = len(live_processes("77.5", settle_s=0))
        assert started < 200
        assert "resource temporarily unavailable" in r.stdout.lower(), r.stdout
    assert live_processes("77.5") == []
    f.close()


def test_reset_restores_the_pristine_workspace_and_ends_processes(sandbox: Sandbox) -> None:
    original = sandbox.read_file("stats.py")
    sandbox.write_file("stats.py", "broken")
    sandbox.exec("touch new.txt; (sleep 555 &)")
    assert sandbox.changed_files() == ["new.txt", "stats.py"]
    sandbox.reset()
    assert sandbox.read_file("stats.py") == original
    assert sandbox.changed_files() == []
    assert live_processes("sleep 555") == []


def test_close_removes_everything(factory: SandboxFactory, paper: Paper) -> None:
    sb = factory.create(paper, paper.snippet("mean"))
    sb.exec("(sleep 444 &); echo started")
    root = sb.root
    assert isinstance(sb, BwrapSandbox)
    groups = list(sb._group.dirs) if sb._group is not None else []
    sb.close()
    assert not root.exists()
    assert live_processes("sleep 444") == []
    assert not any(g.exists() for g in groups)


def test_sweep_removes_only_stale_empty_groups(bwrap_config: SandboxConfig) -> None:
    parent = CGROUP_ROOT / "pids" / CGROUP_PARENT
    if not parent.parent.is_dir():
        pytest.skip("no cgroup v1 pids controller here")
    parent.mkdir(exist_ok=True)
    stale = parent / "stale-test-group"
    stale.mkdir(exist_ok=True)
    fresh = parent / "fresh-test-group"
    fresh.mkdir(exist_ok=True)
    old = time.time() - 3600
    os.utime(stale, (old, old))
    assert sweep_cgroups() >= 1
    assert not stale.exists()
    assert fresh.exists()
    fresh.rmdir()


def test_grading_executor_is_sandboxed_too(factory: SandboxFactory, paper: Paper) -> None:
    from rcb_env import config
    from rcb_env.grading import Grader, GradingConfig

    grader = Grader(
        GradingConfig(python=config.task_python(), timeout_s=60),
        executor=factory.grading_executor(paper),
        scratch=factory.scratch,
    )
    s = paper.snippet("variance")
    probe = (
        "    import os, socket\n"
        "    assert os.getuid() != 0\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "    except OSError:\n"
        "        pass\n"
        f"    assert not os.path.exists({str(paper.root)!r})\n" + s.reference_body
    )
    assert grader.grade(paper, s, probe).passed
    assert not grader.grade(paper, s, "    return 0\n").passed


def test_unreachable_scratch_is_a_clear_error(
    bwrap_config: SandboxConfig, paper: Paper, tmp_path: Path
) -> None:
    from rcb_env.errors import SandboxError

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    f = SandboxFactory(bwrap_config, scratch=closed)
    with pytest.raises(SandboxError, match="not searchable by other users"):
        f.create(paper, paper.snippet("mean"))
    f.close()


def test_the_bwrap_probe_runs_in_the_mounts_every_sandbox_has_not_the_hosts_tree(
    require_bwrap: None,
) -> None:
    """A recursive bind of ``/`` takes every mount under it, and one that goes away meanwhile (a
    container's overlay, torn down by a Docker test on another worker) made the probe fail with
    EINVAL and a Ray node report "bwrap cannot create namespaces here": the probe binds what a
    sandbox binds, and that runs."""
    import subprocess

    from rcb_env.sandbox.backends import bwrap

    argv = bwrap.probe_command("bwrap")
    binds = [argv[i + 1] for i, word in enumerate(argv) if word in ("--bind", "--ro-bind")]
    assert "/" not in binds, argv
    assert "/usr" in binds
    sandbox = bwrap.bwrap_command(
        binds=(), ro_binds=(), cwd="/tmp", env={}, limits=Limits(), identity=None
    )
    start = sandbox.index("bwrap")
    for mount in ("/usr", "/etc", "--proc", "--tmpfs"):
        assert mount in argv, mount
        assert mount in sandbox[start:], mount
    assert subprocess.run(argv, capture_output=True, timeout=20, check=False).returncode == 0
    assert bwrap.probe() is None


def test_no_host_variable_is_readable_in_the_shell_not_even_in_the_launchers_process(
    paper: Paper, bwrap_config: SandboxConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bwrap's pid 1 in the sandbox keeps the environment it was started with
    (``/proc/1/environ``): a key in rcb-env's environment must not be in it."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-rcb-host-secret-7a1f")
    f = SandboxFactory(bwrap_config)
    try:
        with f.create(paper, paper.snippets[0]) as sb:
            r = sb.exec("env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; echo done")
    finally:
        f.close()
    assert r.stdout.rstrip().endswith("done")
    assert "sk-rcb-host-secret-7a1f" not in r.stdout
