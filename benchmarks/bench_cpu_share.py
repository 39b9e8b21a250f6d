"""One sandbox's CPU use against another's run time: a fixed CPU-bound loop in a bwrap sandbox,
timed alone and while another sandbox spins ``--busy`` processes (each in a session of its own),
with each sandbox's cgroup in the cpu controller (this tree) and, in the same run, with the cpu
controller left out (as before the fix), alternating. The machine is shared and noisy: only
ratios measured in the same run mean anything.

Run by hand (not in CI), as root with bwrap and a writable cgroup cpu controller:

    .venv/bin/python -m benchmarks.bench_cpu_share --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from pathlib import Path

from rcb_env import config
from rcb_env.sandbox import SandboxConfig
from rcb_env.sandbox import cgroups as cg
from rcb_env.sandbox import scratch as scratch_dirs
from rcb_env.sandbox.backends.bwrap import BwrapExecutor
from rcb_env.sandbox.base import Command

STOP = "rcb-stop-spinning"
BOMB = f"""\
import os, sys, time
n, seconds = int(sys.argv[1]), float(sys.argv[2])
end = time.monotonic() + seconds
kids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        while time.monotonic() < end and not os.path.exists({STOP!r}):
            for _ in range(20000):
                pass
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
"""
WORK = """\
import time
t, c = time.perf_counter(), time.process_time()
x = 0
for i in range(15_000_000):
    x += i
print(time.perf_counter() - t, time.process_time() - c)
"""


def _run(executor: BwrapExecutor, code: str, area: Path, *args: str) -> str:
    result = executor.run(
        Command(
            (str(config.task_python()), "-c", code, *args),
            cwd=area,
            env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
            timeout_s=120,
        )
    )
    return result.stdout


def _work(executor: BwrapExecutor, area: Path) -> tuple[float, float]:
    wall, cpu = _run(executor, WORK, area).split()
    return float(wall), float(cpu)


def _spinning(area: Path, busy: int) -> bool:
    """True once ``busy`` processes work in ``area``."""
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/cwd") == str(area):
                    count += 1
    return count >= busy


def one_round(executor: BwrapExecutor, busy: int) -> tuple[float, float, float]:
    """(alone, loaded) wall seconds of the loop, and its CPU seconds under load."""
    scratch = config.scratch_dir()
    work, bomb = (scratch_dirs.make("rcb-bench-cpu-", scratch) for _ in range(2))
    for folder in (work, bomb):
        folder.chmod(0o755)
    try:
        _work(executor, work)
        alone, _ = _work(executor, work)
        thread = threading.Thread(target=_run, args=(executor, BOMB, bomb, str(busy), "90"))
        thread.start()
        try:
            deadline = time.monotonic() + 60
            while not _spinning(bomb, busy) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            loaded, cpu = _work(executor, work)
        finally:
            (bomb / STOP).write_text("")
            thread.join(120)
        return alone, loaded, cpu
    finally:
        for folder in (work, bomb):
            scratch_dirs.discard(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=100)
    args = parser.parse_args()
    executor = BwrapExecutor(
        SandboxConfig(backend="bwrap", python=config.task_python(), warm_grading=False),
        config.scratch_dir(),
    )
    if cg.detect().cpu_version is None:
        raise SystemExit(f"no cpu controller here: {cg.detect().cpu_problem}")
    ratios: dict[str, list[float]] = {"cpu share": [], "no cpu controller": []}
    controller = cg.CPU
    for r in range(args.rounds):
        for label, found in ratios.items():
            cg.CPU = controller if label == "cpu share" else "no-such-controller"
            try:
                alone, loaded, cpu = one_round(executor, args.busy)
            finally:
                cg.CPU = controller
            found.append(loaded / alone)
            print(
                f"round {r + 1} {label:>18}: alone {alone:6.2f} s, beside {args.busy} busy "
                f"sessions {loaded:6.2f} s (its CPU {cpu:5.2f} s): {loaded / alone:5.2f}x "
                f"[load {os.getloadavg()[0]:.1f}]",
                flush=True,
            )
    for label, xs in ratios.items():
        print(f"median ratio, {label}: {statistics.median(xs):.2f}x")


if __name__ == "__main__":
    main()
