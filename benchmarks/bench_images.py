"""The published papers in containers against bwrap, in one run: ``run_eval`` with the oracle agent
on each backend (same pset, same ``--jobs``, warm grading), per paper its result, mean grading
time and the docker/bwrap ratio, with its image's size.

Needs ``rcb-env setup researchcodebench`` (bwrap) and ``rcb-env images build --pset
researchcodebench`` (docker) first, and ``DOCKER_HOST`` pointing at the engine. Run by hand:
``.venv/bin/python -m benchmarks.bench_images [--paper ID ...] [--null]`` (not part of ``make
test``). The machine is shared and noisy: only ratios measured in the same run mean anything.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rcb_env.results import read_records
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig
from rcb_env.sandbox.backends.docker import engine as docker
from rcb_env.sandbox.backends.docker import images
from rcb_env.task import load


def _run(
    pset_name: str, papers: list[str], backend: str, agent: str, jobs: int, out: Path
) -> float:
    pset = load(pset_name)
    if papers:
        pset = pset.model_copy(update={"papers": tuple(p for p in pset.papers if p.id in papers)})
    cfg = EvalConfig(agent=agent, sandbox=SandboxConfig(backend=backend, warm_grading=True))
    start = time.perf_counter()
    run_eval(pset, cfg, out, jobs=jobs)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pset", default="researchcodebench")
    parser.add_argument("--paper", action="append", default=[], help="Only these papers.")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--agent", default="oracle")
    args = parser.parse_args()
    runs = Path(tempfile.mkdtemp(prefix="bench-images-"))
    walls: dict[str, float] = {}
    per: dict[str, dict[str, list[float]]] = {}
    passed: dict[str, dict[str, int]] = {}
    for backend in ("bwrap", "docker"):
        walls[backend] = _run(args.pset, args.paper, backend, args.agent, args.jobs, runs / backend)
        for r in read_records(runs / backend / "episodes.jsonl"):
            paper = r.paper_id
            per.setdefault(paper, {}).setdefault(backend, [])
            if r.grade is not None:
                per[paper][backend].append(r.grade.duration_s)
            passed.setdefault(paper, {}).setdefault(backend, 0)
            passed[paper][backend] += bool(r.passed)
    engine = docker.client()
    pset = load(args.pset)
    sizes = {}
    for each in pset.papers:
        tag = images.image_tag(each, images.ImageConfig())
        if images.image_exists(engine, tag):
            sizes[each.id] = int(engine.images.get(tag).attrs.get("Size", 0))
    head = ("paper", "passed b/d", "grade s bwrap", "docker", "ratio", "image")
    print(f"{head[0]:28} {head[1]:>11} {head[2]:>14} {head[3]:>8} {head[4]:>6} {head[5]:>8}")
    for paper in sorted(per):
        b = per[paper].get("bwrap") or [0.0]
        d = per[paper].get("docker") or [0.0]
        mb, md = statistics.fmean(b), statistics.fmean(d)
        ok = f"{passed[paper].get('bwrap', 0)}/{passed[paper].get('docker', 0)}"
        print(
            f"{paper:28} {ok:>11} {mb:14.2f} {md:8.2f} {md / mb if mb else 0:6.2f} "
            f"{sizes.get(paper, 0) / 1e9:7.2f}G"
        )
    ratio = walls["docker"] / walls["bwrap"]
    print(f"wall: bwrap {walls['bwrap']:.0f} s, docker {walls['docker']:.0f} s, ratio {ratio:.2f}")
    print(f"runs in {runs}")


if __name__ == "__main__":
    main()
