"""Docker backend latencies against bwrap, measured in the same run (ratios are what count).

- new sandbox: cold (start a container) vs warm (take one from the pool); bwrap for comparison
- reset inside an episode (workspace swap, processes killed)
- exec: one shell command (``true``) in the persistent session
- grading: a reference graded in a fresh container vs a fresh bwrap sandbox

Needs an engine and the bundled numpy papers' images (``rcb-env images build``). Run by hand:
``.venv/bin/python -m benchmarks.bench_docker --base rcb-env/debian-python:bookworm``
(with DOCKER_HOST pointing at the engine).
Goals (issue 4): reset <= 300 ms cold, <= 50 ms warm; exec overhead <= 120 ms.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

from benchmarks._timing import p50, timed
from rcb_env import SandboxConfig, SandboxFactory, config
from rcb_env.grading import Grader, GradingConfig
from rcb_env.task import Paper, Snippet, bundled_root, load


def _open_close(f: SandboxFactory, paper: Paper, snippet: Snippet) -> None:
    f.create(paper, snippet).close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="rcb-env/debian-python:bookworm")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    n = args.repeat
    paper = load(bundled_root()).paper("adamw-warmup")
    snippet = paper.snippet("bias correction")
    python = config.task_python()
    configs = {
        "bwrap": SandboxConfig(backend="bwrap", python=python),
        "docker cold": SandboxConfig(backend="docker", options={"docker_base": args.base}),
        "docker warm": SandboxConfig(
            backend="docker", options={"docker_base": args.base, "pool_size": 2}
        ),
    }
    results: dict[str, dict[str, float]] = {}
    for name, cfg in configs.items():
        f = SandboxFactory(cfg)
        f.warm([paper])
        row: dict[str, float] = {}

        if name == "docker warm":
            time.sleep(3)  # let the pool fill
            samples = []
            for _ in range(n):
                t = time.perf_counter()
                sb = f.create(paper, snippet)
                samples.append((time.perf_counter() - t) * 1000)
                sb.close()
                time.sleep(0.6)  # the pool refills in the background
            row["new sandbox"] = p50(samples)
        else:
            row["new sandbox"] = p50(timed(partial(_open_close, f, paper, snippet), n))
        with f.create(paper, snippet) as sb:
            sb.exec("true")
            row["reset"] = p50(timed(sb.reset, n))
            sb.exec("true")
            row["exec true"] = p50(timed(partial(sb.exec, "true"), n * 3))
        grader = Grader(GradingConfig(python=python), executor=f.grading_executor(paper))
        row["grading"] = p50(
            timed(partial(grader.grade, paper, snippet, snippet.reference_body), max(3, n // 2))
        )
        f.close()
        results[name] = row
    base = results["bwrap"]
    print(f"{n} repetitions; p50 in ms; ratio = docker / bwrap measured in this run\n")
    print(f"{'':14s}" + "".join(f"{k:>22s}" for k in results))
    for metric in ("new sandbox", "reset", "exec true", "grading"):
        cells = []
        for name, row in results.items():
            ratio = "" if name == "bwrap" else f" ({row[metric] / base[metric]:.1f}x)"
            cells.append(f"{row[metric]:9.1f}{ratio:>13s}")
        print(f"{metric:14s}" + "".join(f"{c:>22s}" for c in cells))
    print("\ngoals: new container <= 300 ms cold, <= 50 ms warm; exec overhead <= 120 ms")


if __name__ == "__main__":
    main()
