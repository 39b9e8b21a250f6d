"""Per-sandbox control groups: a memory and a pids limit, a share of the CPU, OOM accounting,
and a kill of every process of the group. bubblewrap sets no limits of its own; this is where
they come from.

Both kernel interfaces are supported, per controller:

- cgroup v1: ``<root>/<controller>/<parent>/<group>`` (``memory.limit_in_bytes``, ``pids.max``,
  ``cpu.shares``, ``cpu.cfs_quota_us``).
- cgroup v2 (the unified hierarchy: ``<root>`` itself, or ``<root>/unified`` on a hybrid host):
  ``<root>/<parent>/<group>`` with ``memory.max``, ``memory.swap.max``, ``pids.max``,
  ``cpu.weight``, ``cpu.max``; the controllers are enabled in ``cgroup.subtree_control`` down
  to ``<parent>``. This needs write access to the hierarchy's root (root on the host, or a
  delegated subtree: run rcb-env under ``systemd-run --scope -p Delegate=yes`` and point
  ``cgroup_root`` at that subtree).

A memory or pids controller that neither interface can provide is a
:class:`CgroupUnavailableError` naming why, unless the caller opted out
(``cgroup_limits="best-effort"`` or ``"off"``); rlimits always apply.

The CPU: every group gets the same weight (the kernel's default, written explicitly) under the
one parent, so when runs compete each gets an equal share of the CPU however many processes it
starts; a run alone may still use every core. Without a cpu group, the sandboxes' processes
compete one by one (with the kernel's autogroups, session by session), and a run that starts a
hundred busy processes, each in a session of its own, takes nearly all of the CPU from a
concurrent run. ``Limits.cpus`` adds a hard cap. The cpu controller is used wherever it is
available but not required: without it the sandboxes run as before and rcb-env logs a warning
(once) that one run's CPU use can slow the others; only a cap that was asked for
(``Limits.cpus``) and cannot be set is an error under ``required``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rcb_env.errors import SandboxError
from rcb_env.execution import ExecResult
from rcb_env.logs import get_logger
from rcb_env.sandbox.base import Limits

log = get_logger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "rcb-env"
CONTROLLERS = ("memory", "pids")
"""The controllers a sandbox must have (policy ``required``)."""
CPU = "cpu"
"""The controller of each group's CPU share and cap: used where available, never required."""
CPU_WEIGHT_V1 = 1024
"""``cpu.shares`` of every group (v1): the same for all, the kernel's default."""
CPU_WEIGHT_V2 = 100
"""``cpu.weight`` of every group (v2): the same for all, the kernel's default."""
CPU_PERIOD_US = 100_000
"""The period of a cap (``Limits.cpus``): the cap is ``cpus`` times this much CPU time per
period."""
_PAGE = 4096

CgroupPolicy = Literal["required", "best-effort", "off"]
"""``required``: fail loudly when a limit cannot be set; ``best-effort``: set what can be set;
``off``: no cgroups (rlimits only)."""


class CgroupUnavailableError(SandboxError):
    """A sandbox's memory or pids limit cannot be set on this host."""


@dataclass(frozen=True)
class Layout:
    """Where each controller lives on this host."""

    v1: dict[str, Path] = field(default_factory=dict)
    """Controller -> its writable v1 hierarchy."""
    v2: Path | None = None
    """The unified (v2) hierarchy, when it is mounted and writable."""
    v2_controllers: frozenset[str] = frozenset()
    """Controllers the v2 hierarchy offers (``cgroup.controllers``)."""
    problems: tuple[str, ...] = ()
    """Why each missing controller is missing."""
    cpu_problem: str | None = None
    """Why the cpu controller is missing (None: it is available)."""

    def version_of(self, controller: str) -> Literal["v1", "v2"] | None:
        if controller in self.v1:
            return "v1"
        if self.v2 is not None and controller in self.v2_controllers:
            return "v2"
        return None

    @property
    def missing(self) -> tuple[str, ...]:
        """The required controllers (memory, pids) that neither interface provides."""
        return tuple(c for c in CONTROLLERS if self.version_of(c) is None)

    @property
    def cpu_version(self) -> Literal["v1", "v2"] | None:
        """Where the cpu controller is (None: nowhere, and the CPU is not shared per sandbox)."""
        return self.version_of(CPU)


def detect(root: Path = CGROUP_ROOT) -> Layout:
    """Find the memory, pids and cpu controllers under ``root`` (v1 first, then v2)."""
    v1: dict[str, Path] = {}
    for c in (*CONTROLLERS, CPU):
        d = root / c
        if (d / "cgroup.procs").exists() and os.access(d, os.W_OK):
            v1[c] = d
    v2: Path | None = None
    for candidate in (root, root / "unified"):
        if (candidate / "cgroup.controllers").exists():
            v2 = candidate
            break
    offered: frozenset[str] = frozenset()
    problems: list[str] = []
    if v2 is not None:
        with contextlib.suppress(OSError):
            offered = frozenset((v2 / "cgroup.controllers").read_text().split())
        if not os.access(v2, os.W_OK):
            problems.append(
                f"{v2} (cgroup v2) is not writable by this user: run as root or under a "
                "delegated scope (systemd-run --scope -p Delegate=yes) and set cgroup_root"
            )
            v2, offered = None, frozenset()
    for c in CONTROLLERS:
        if c in v1 or c in offered:
            continue
        if v2 is not None:
            problems.append(
                f"the {c} controller is neither a writable cgroup v1 hierarchy ({root / c}) nor "
                f"offered by cgroup v2 ({v2}/cgroup.controllers: "
                f"{' '.join(sorted(offered)) or 'empty'}; a controller bound to v1 is not "
                "available in v2)"
            )
        else:
            problems.append(
                f"the {c} controller has no writable cgroup v1 hierarchy ({root / c}) and no "
                f"cgroup v2 hierarchy is mounted under {root}"
            )
    cpu_problem = None
    if CPU not in v1 and CPU not in offered:
        cpu_problem = (
            f"the cpu controller is neither a writable cgroup v1 hierarchy ({root / CPU}) nor "
            + (
                f"offered by cgroup v2 ({v2}/cgroup.controllers: "
                f"{' '.join(sorted(offered)) or 'empty'})"
                if v2 is not None
                else f"in a writable cgroup v2 hierarchy under {root}"
            )
        )
    return Layout(
        v1=v1, v2=v2, v2_controllers=offered, problems=tuple(problems), cpu_problem=cpu_problem
    )


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_cpu(why: str) -> None:
    """Say, once per reason and process, that the sandboxes do not get a CPU share each."""
    with _warned_lock:
        if why in _warned:
            return
        _warned.add(why)
    log.warning(
        "the sandboxes' CPU is not shared per sandbox: one run with many busy processes can "
        "slow the others' runs (and their verdicts, through timeouts); give rcb-env a cgroup "
        "cpu controller it can write (root, or a delegated cgroup v2 subtree as cgroup_root)",
        why=why,
    )


def check(policy: CgroupPolicy, root: Path = CGROUP_ROOT) -> Layout:
    """The layout, after making sure ``policy`` can be honoured.

    Raises:
        CgroupUnavailableError: ``required`` and a controller is missing (with why and how to
            opt out).
    """
    layout = detect(root)
    if policy == "required" and layout.missing:
        raise CgroupUnavailableError(
            f"cannot limit the sandboxes' {' and '.join(layout.missing)}: "
            + "; ".join(layout.problems)
            + ". Fix that, or opt out with cgroup_limits='best-effort' (limit what can be "
            "limited) or 'off' (rlimits only; --cgroup-limits on the command line)"
        )
    if policy != "off" and layout.cpu_problem is not None:
        _warn_cpu(layout.cpu_problem)
    return layout


def _enable_cpu(v2: Path, parent: str) -> str | None:
    """Enable the cpu controller in ``cgroup.subtree_control`` from ``v2`` down to ``parent``,
    on its own, so that a refusal (with real-time group scheduling, while a real-time process
    runs in a group below) leaves memory and pids alone; None, or why it could not be."""
    here = v2
    for part in [None, *parent.split("/")]:
        if part is not None:
            here = here / part
        try:
            here.mkdir(exist_ok=True)
            control = here / "cgroup.subtree_control"
            current = set(control.read_text().split()) if control.exists() else set()
            if CPU not in current:
                control.write_text(f"+{CPU}")
        except OSError as exc:
            return f"cannot enable the cpu controller in {here}/cgroup.subtree_control: {exc}"
    return None


def _enable(v2: Path, parent: str, controllers: list[str]) -> None:
    """Enable ``controllers`` in ``cgroup.subtree_control`` from ``v2`` down to ``parent``."""
    want = " ".join(f"+{c}" for c in controllers)
    here = v2
    for part in [None, *parent.split("/")]:
        if part is not None:
            here = here / part
            here.mkdir(exist_ok=True)
        control = here / "cgroup.subtree_control"
        current = set(control.read_text().split()) if control.exists() else set()
        if not set(controllers) <= current:
            control.write_text(want)


class Cgroup:
    """One sandbox's group: limits set on creation, processes enter through
    :meth:`enter_command`, :meth:`remove` kills them all and deletes the group."""

    def __init__(
        self,
        limits: Limits,
        parent: str = CGROUP_PARENT,
        *,
        policy: CgroupPolicy = "required",
        root: Path = CGROUP_ROOT,
    ) -> None:
        self.name = f"{parent}/{uuid.uuid4().hex[:12]}"
        self.dirs: list[Path] = []
        self.v2_dir: Path | None = None
        self.limit_bytes = limits.memory_mb * 1024 * 1024
        self.cpu_dir: Path | None = None
        """The group's directory in the hierarchy of the cpu controller (None: no CPU share)."""
        if policy == "off":
            return
        layout = check(policy, root)
        cpu_problem = layout.cpu_problem
        try:
            for c, base in layout.v1.items():
                if c == CPU:
                    continue  # below: its failure is not the group's
                d = base / self.name
                d.mkdir(parents=True, exist_ok=True)
                self.dirs.append(d)
                if c == "memory":
                    (d / "memory.limit_in_bytes").write_text(str(self.limit_bytes))
                    if (d / "memory.memsw.limit_in_bytes").exists():
                        (d / "memory.memsw.limit_in_bytes").write_text(str(self.limit_bytes))
                else:
                    (d / "pids.max").write_text(str(limits.pids))
            v2_wanted = [c for c in CONTROLLERS if layout.version_of(c) == "v2"]
            v2_cpu = layout.cpu_version == "v2"
            if layout.v2 is not None and (v2_wanted or v2_cpu or not self.dirs):
                # Even with no controller, a v2 group lets every process be found and killed.
                if v2_cpu:
                    cpu_problem = _enable_cpu(layout.v2, parent)
                _enable(layout.v2, parent, v2_wanted)
                d = layout.v2 / self.name
                d.mkdir(exist_ok=True)
                self.v2_dir = d
                self.dirs.append(d)
                if "memory" in v2_wanted:
                    (d / "memory.max").write_text(str(self.limit_bytes))
                    if (d / "memory.swap.max").exists():
                        (d / "memory.swap.max").write_text("0")
                if "pids" in v2_wanted:
                    (d / "pids.max").write_text(str(limits.pids))
                if v2_cpu and cpu_problem is None:
                    cpu_problem = _set_cpu(d, limits, "v2")
                    if cpu_problem is None:
                        self.cpu_dir = d
            if layout.cpu_version == "v1":
                d = layout.v1[CPU] / self.name
                cpu_problem = _set_cpu(d, limits, "v1")
                if cpu_problem is None:
                    self.cpu_dir = d
                    self.dirs.append(d)
        except OSError as exc:
            self.remove()
            if policy == "required":
                raise CgroupUnavailableError(f"cannot set up the sandbox's cgroup: {exc}") from exc
            self.dirs, self.v2_dir, self.cpu_dir = [], None, None
            return
        if cpu_problem is not None:
            if limits.cpus is not None and policy == "required":
                self.remove()
                raise CgroupUnavailableError(
                    f"cannot cap the sandbox's CPU at {limits.cpus} cores (Limits.cpus): "
                    f"{cpu_problem}. Fix that, leave Limits.cpus unset, or opt out with "
                    "cgroup_limits='best-effort'"
                )
            _warn_cpu(cpu_problem)

    def enter_command(self) -> list[str]:
        """A prefix that moves the launching shell into the group before it execs the rest, so
        no process of the sandbox ever runs outside it."""
        if not self.dirs:
            return []
        moves = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in self.dirs)
        return ["sh", "-c", f'{moves}; exec "$@"', "rcb-cgroup"]

    def add(self, pid: int) -> None:
        """Move process ``pid`` (not its existing children) into the group."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def memory_events(self) -> tuple[int, bool]:
        """(OOM kills of the group's processes, whether the group ever reached its own limit).
        A kill while the group stayed below its limit came from memory pressure outside it:
        cgroup v1 counts a kill in the victim's group whichever level ran out. The limit counts
        as reached when the usage high-water mark is within a page of it (this kernel does not
        count ``failcnt`` for the sandbox's level) or ``failcnt`` (v1) / ``max`` (v2) says so."""
        kills, reached = 0, False
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                if d == self.v2_dir:
                    if not (d / "memory.events").exists():
                        continue
                    events = dict(
                        line.split() for line in (d / "memory.events").read_text().splitlines()
                    )
                    kills = max(kills, int(events.get("oom_kill", 0)))
                    peak_file = d / "memory.peak"
                    peak = int(peak_file.read_text()) if peak_file.exists() else 0
                    reached = reached or int(events.get("max", 0)) > 0
                    reached = reached or peak + _PAGE >= self.limit_bytes
                    continue
                ctl = d / "memory.oom_control"
                if not ctl.exists():
                    continue
                for line in ctl.read_text().splitlines():
                    if line.startswith("oom_kill "):
                        kills = int(line.split()[1])
                for prefix in ("memory.", "memory.memsw."):
                    if not (d / f"{prefix}limit_in_bytes").exists():
                        continue
                    limit = int((d / f"{prefix}limit_in_bytes").read_text())
                    peak = int((d / f"{prefix}max_usage_in_bytes").read_text())
                    failed = int((d / f"{prefix}failcnt").read_text())
                    reached = reached or failed > 0 or peak + _PAGE >= limit
        return kills, reached

    def pids(self) -> set[int]:
        """Every process in the group now."""
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return found

    def kill_all(self) -> None:
        if self.v2_dir is not None and (self.v2_dir / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.v2_dir / "cgroup.kill").write_text("1")
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _set_cpu(d: Path, limits: Limits, version: Literal["v1", "v2"]) -> str | None:
    """Give the group ``d`` (made here for v1) the equal CPU weight and, with ``limits.cpus``,
    its cap (at most the machine's cores); None, or why that failed (the v1 group made here is
    removed again)."""
    quota = None
    if limits.cpus is not None:
        cores = min(limits.cpus, os.cpu_count() or 1)
        quota = max(1000, round(cores * CPU_PERIOD_US))
    try:
        if version == "v2":
            (d / "cpu.weight").write_text(str(CPU_WEIGHT_V2))
            (d / "cpu.max").write_text(f"{quota or 'max'} {CPU_PERIOD_US}")
            return None
        d.mkdir(parents=True)
        try:
            (d / "cpu.shares").write_text(str(CPU_WEIGHT_V1))
            if quota is not None:
                (d / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                (d / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError:
            with contextlib.suppress(OSError):
                d.rmdir()
            raise
    except OSError as exc:
        return f"cannot set the CPU share of the sandbox's group {d}: {exc}"
    return None


def with_oom(result: ExecResult, kills_before: int, after: tuple[int, bool]) -> ExecResult:
    """``result`` marked with the OOM kills the group saw during the command."""
    kills, reached = after
    if kills <= kills_before:
        return result
    return result.model_copy(update={"oom_killed" if reached else "host_oom": True})


def sweep(
    min_age_s: float = 60.0, parent_name: str = CGROUP_PARENT, root: Path = CGROUP_ROOT
) -> int:
    """Remove empty groups left by rcb-env processes that were killed before cleaning up.

    Only groups older than ``min_age_s`` are touched, so a sandbox that is just moving into its
    new group is never raced; a group with processes refuses ``rmdir`` and stays. Returns how
    many were removed.
    """
    layout = detect(root)
    parents = [base / parent_name for base in layout.v1.values()]
    if layout.v2 is not None:
        parents.append(layout.v2 / parent_name)
    removed = 0
    now = time.time()
    for parent in parents:
        if not parent.is_dir():
            continue
        for d in parent.iterdir():
            try:
                if not d.is_dir() or now - d.stat().st_mtime < min_age_s:
                    continue
                if (d / "cgroup.procs").read_text().strip():
                    continue
                d.rmdir()
                removed += 1
            except OSError:
                continue
    return removed
