"""Sandbox cgroups on both kernel interfaces: the v1 hierarchies of this host, and a cgroup v2
hierarchy the test mounts itself (the host binds memory and pids to v1, so that v2 mount offers
neither: the loud error, the opt-out and the group's process handling are tested on it for real;
the v2 limit files are tested on a folder laid out like a v2 hierarchy that offers them)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rcb_env.sandbox import Limits, SandboxConfig, SandboxFactory
from rcb_env.sandbox import cgroups as cg
from rcb_env.sandbox.conformance import live_processes
from rcb_env.task import bundled_root, load

#: The parent group of these tests: the cgroup2 mount is the host's one hierarchy, which every
#: worker of a parallel run shares, so each worker has a parent of its own (one worker's clean-up
#: removed another's group while it was in use).
_PARENT = f"rcb-test-{os.getpid()}"


@pytest.fixture
def v2_mount(tmp_path: Path) -> Iterator[Path]:
    """A real cgroup2 mount (the host's unified hierarchy, mounted again here)."""
    where = tmp_path / "cgroup2"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "cgroup2", "none", str(where)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount cgroup2 in CI: {mounted.stderr}")
        pytest.skip(f"cannot mount cgroup2 here: {mounted.stderr}")
    try:
        yield where
    finally:
        parent = where / _PARENT
        if parent.is_dir():
            for child in parent.iterdir():
                if child.is_dir():
                    child.rmdir()
            parent.rmdir()
        subprocess.run(["umount", str(where)], check=True)


def test_this_hosts_v1_hierarchies_provide_both_limits() -> None:
    layout = cg.detect()
    if layout.missing:
        pytest.skip(f"this host has no writable v1 memory/pids: {layout.problems}")
    assert layout.version_of("memory") == "v1"
    assert layout.version_of("pids") == "v1"
    cg.check("required")  # does not raise


def test_a_v2_hierarchy_without_the_controllers_is_a_loud_error(v2_mount: Path) -> None:
    layout = cg.detect(v2_mount)
    assert layout.v2 == v2_mount
    assert layout.v1 == {}
    assert layout.missing == ("memory", "pids")
    with pytest.raises(cg.CgroupUnavailableError) as caught:
        cg.check("required", v2_mount)
    message = str(caught.value)
    assert "memory and pids" in message
    assert "cgroup.controllers" in message
    assert "best-effort" in message
    with pytest.raises(cg.CgroupUnavailableError):
        cg.Cgroup(Limits(), _PARENT, policy="required", root=v2_mount)


def test_no_hierarchy_at_all_is_a_loud_error(tmp_path: Path) -> None:
    with pytest.raises(cg.CgroupUnavailableError, match="no cgroup v2 hierarchy is mounted"):
        cg.check("required", tmp_path)
    group = cg.Cgroup(Limits(), _PARENT, policy="best-effort", root=tmp_path)
    assert group.dirs == []
    assert group.enter_command() == []


def test_best_effort_on_v2_still_gathers_and_kills_every_process(v2_mount: Path) -> None:
    group = cg.Cgroup(Limits(), _PARENT, policy="best-effort", root=v2_mount)
    assert group.v2_dir is not None
    assert group.v2_dir.parent == v2_mount / _PARENT
    proc = subprocess.Popen(
        [*group.enter_command(), "sh", "-c", "sleep 612.5 & exec sleep 613.5"],
        start_new_session=True,
    )
    try:
        for _ in range(100):
            if len(group.pids()) == 2:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert proc.pid in group.pids()
        assert len(group.pids()) == 2  # the child that left the shell is in the group too
        group.remove()  # cgroup.kill, then rmdir
        proc.wait(timeout=10)
        assert live_processes("sleep\x00612.5") == []
        assert not group.v2_dir.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_v2_limits_are_written_where_the_controllers_are_offered(tmp_path: Path) -> None:
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    group = cg.Cgroup(Limits(memory_mb=300, pids=64), "rcb-env", policy="required", root=root)
    d = group.v2_dir
    assert d is not None
    assert (d / "memory.max").read_text() == str(300 * 1024 * 1024)
    assert (d / "pids.max").read_text() == "64"
    # the controllers are enabled on the way down to the sandbox's group
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (root / "rcb-env" / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert group.memory_events() == (0, False)
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.memory_events() == (1, True)  # killed at its own limit: the candidate's doing
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 2\n")
    assert group.memory_events() == (2, False)  # killed below its limit: memory ran out outside


def test_bwrap_refuses_to_run_without_limits_unless_told(
    v2_mount: Path, require_bwrap: None
) -> None:
    paper = load(bundled_root()).paper("adamw-warmup")
    cfg = SandboxConfig(
        backend="bwrap", options={"cgroup_root": v2_mount, "cgroup_parent": _PARENT}
    )
    with pytest.raises(cg.CgroupUnavailableError, match="cannot limit the sandboxes"):
        SandboxFactory(cfg)
    relaxed = cfg.with_options(cgroup_limits="best-effort")
    f = SandboxFactory(relaxed)
    try:
        with f.create(paper, paper.snippets[0]) as sb:
            assert sb.exec("echo ok").stdout == "ok\n"
            sb.exec("(sleep 655.5 &)")
            sb.reset()  # the session's v2 group is killed and removed
            assert live_processes("sleep\x00655.5") == []
    finally:
        f.close()
