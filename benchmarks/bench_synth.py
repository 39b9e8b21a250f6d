"""``rcb-env synth`` on published papers: verified training snippets per hour, and what a run
over every runnable paper would take.

1. baseline, measured in the same run: one cold reference run of each verified paper's test
   (the unit every check is made of);
2. the census: coverage and proposal on every runnable paper (``--census``: candidates per
   paper, what the static rules dropped);
3. ``synth`` itself on ``--paper`` papers (``--limit`` candidates each, ``--jobs``): kept per
   paper, drop reasons, seconds per candidate, verified snippets per hour, each stage's time
   and the ratio to the baseline;
4. the projection: the census's candidates at the measured seconds per candidate and kept rate;
5. ``--ray``: the same synthesis on a Ray cluster of one single-CPU worker node, then of two
   (real raylets on this machine, ``ray.cluster_utils.Cluster``; the head has no CPUs), each
   from scratch: verified snippets per hour on each, and the two-node/one-node ratio.

Run by hand after ``make published`` (not in CI; minutes to hours):
``.venv/bin/python -m benchmarks.bench_synth --paper minp --paper Tanh-Init --jobs 2``.
The machine is shared and noisy: the ratio to the baseline is what carries over.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from rcb_env.dispatch.runnable import RunsOn
from rcb_env.grading.grader import Grader, GradingConfig
from rcb_env.runner.eval import runnable
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.synth import coverage
from rcb_env.synth.propose import Rules
from rcb_env.synth.run import SynthPlan, SynthResult, proposals, synthesize
from rcb_env.task import load
from rcb_env.task.models import Pset
from rcb_env.validation.dispatcher import Local, dispatcher_for


def _census(
    pset: Pset, sandbox: SandboxConfig, cache: Path | None
) -> dict[str, tuple[int, Counter[str], float]]:
    """Per paper: candidates, static drops by reason, seconds of the coverage run; and the
    ceiling: every run of 1 to 6 (and to 12) statements at every offset that the static drops
    keep (what the papers' tests allow, were regions allowed to cross). ``cache``: a synth
    run's coverage folder (``<out>/.work/coverage``), read and filled."""
    out = {}
    ceilings = Counter[int]()
    factory = SandboxFactory(sandbox.model_copy(update={"warm_grading": False}))
    try:
        for p in pset.papers:
            start = time.perf_counter()
            cached = cache / f"{p.id}.json" if cache is not None else None
            if cached is not None and cached.is_file():
                found = {k: set(v) for k, v in json.loads(cached.read_text()).items()}
            else:
                try:
                    found = coverage.measure(
                        p, factory.grading_executor(p), scratch=factory.scratch, timeout_s=900
                    )
                except Exception as exc:
                    print(f"  {p.id}: coverage failed: {exc}")
                    continue
                if cached is not None:
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    cached.write_text(json.dumps({k: sorted(v) for k, v in found.items()}))
            took = time.perf_counter() - start
            regions, dropped = proposals(p, found, Rules())
            most = {n: len(proposals(p, found, Rules(windows=n))[0]) for n in (6, 12)}
            ceilings.update(most)
            out[p.id] = (len(regions), Counter(d.reason for d in dropped), took)
            rules = dict(Counter(r.rule for r in regions))
            print(
                f"  {p.id:30s} {len(regions):4d} candidates {rules}; ceiling {most[6]} "
                f"(runs of 1-6 statements), {most[12]} (1-12) ({took:5.1f} s coverage)",
                flush=True,
            )
    finally:
        factory.close()
    total = sum(n for n, _, _ in out.values())
    print(
        f"  all: {total} candidates; ceiling {ceilings[6]} (runs of 1-6 statements at every "
        f"offset), {ceilings[12]} (1-12)"
    )
    return out


def _baseline(pset: Pset, sandbox: SandboxConfig) -> dict[str, float]:
    """Seconds of one cold reference run of each paper's test."""
    factory = SandboxFactory(sandbox.model_copy(update={"warm_grading": False}))
    out = {}
    try:
        for p in pset.papers:
            grader = Grader(GradingConfig(), executor=factory.grading_executor(p))
            s = p.snippets[0]
            start = time.perf_counter()
            result = grader.grade(p, s, s.reference_body)
            out[p.id] = time.perf_counter() - start
            print(f"  {p.id:30s} reference {result.outcome.value} in {out[p.id]:.1f} s")
    finally:
        factory.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pset", default="researchcodebench")
    parser.add_argument("--paper", action="append", default=[])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--cap", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--census", action="store_true", help="Also census every runnable paper.")
    parser.add_argument(
        "--coverage", type=Path, help="A synth run's coverage folder (<out>/.work/coverage)."
    )
    parser.add_argument("--out", type=Path, help="Where the training pset goes (default: a temp).")
    parser.add_argument("--ray", action="store_true", help="Also on one, then two Ray nodes.")
    parser.add_argument("--no-local", action="store_true", help="Skip the local synth run.")
    args = parser.parse_args()
    sandbox = SandboxConfig(backend=args.sandbox)
    whole, _ = runnable(load(args.pset), RunsOn(sandbox, GradingConfig()), here=True)
    scratch = Path(tempfile.mkdtemp(prefix="rcb-bench-synth-"))

    census = {}
    if args.census:
        print(f"census of {len(whole.papers)} runnable papers (coverage + proposal):")
        census = _census(whole, sandbox, args.coverage)
    if not args.paper:
        return  # the census alone
    chosen = load(args.pset, papers=set(args.paper))
    print("baseline: one cold reference run per paper")
    base = _baseline(chosen, sandbox)

    plan = SynthPlan(
        sandbox=sandbox, jobs=args.jobs, limit=args.limit, cap=args.cap, repeat=args.repeat
    )
    if args.ray:
        _on_ray(chosen, plan, scratch)
    if args.no_local:
        return
    out = args.out or scratch / "train"
    print(f"synth on {', '.join(args.paper)} (--limit {args.limit} --jobs {args.jobs}) -> {out}")
    result = synthesize(chosen, plan, out, Local())
    _report(result, args.paper, args.jobs, base, census)


def _report(
    result: SynthResult,
    papers: list[str],
    jobs: int,
    base: dict[str, float],
    census: dict[str, tuple[int, Counter[str], float]],
) -> None:
    """What the local run kept and dropped, its rate, and the projection over the census."""
    m = result.manifest
    per_paper = Counter(s.provenance.paper for s in m.snippets)
    tried = Counter(d.paper for d in m.dropped if d.stage != "propose") + per_paper
    print(f"  wall {result.wall_s:.0f} s; stages: {result.stage_s}")
    for pid in papers:
        print(f"  {pid:30s} kept {per_paper[pid]:3d} of {tried[pid]:3d} candidates verified")
    reasons = Counter(d.reason for d in m.dropped if d.stage != "propose")
    print(f"  dropped while verifying: {dict(reasons)}")
    static = Counter(d.reason for d in m.dropped if d.stage == "propose")
    print(f"  dropped by the static rules: {dict(static)}")
    scores = sorted(s.difficulty.mutation_score for s in m.snippets)
    sizes = sorted(s.weight for s in m.snippets)
    if m.snippets:
        median = scores[len(scores) // 2]
        print(f"  sizes (lines) {sizes}; mutation scores min {scores[0]} median {median}")
    candidates = sum(tried.values())
    per_candidate = result.wall_s / max(1, candidates)
    kept = len(m.snippets)
    per_hour = kept / result.wall_s * 3600 if result.wall_s else 0.0
    unit = sum(base.values()) / max(1, len(base))
    print(
        f"  {per_candidate:.1f} s per candidate = {per_candidate / unit:.1f} reference runs; "
        f"{per_hour:.0f} verified snippets per hour on {jobs} jobs"
    )
    if census and candidates:
        total = sum(n for n, _, _ in census.values())
        rate = kept / candidates
        hours = total * per_candidate / 3600
        print(
            f"projection over {len(census)} papers: {total} candidates, about {total * rate:.0f} "
            f"verified (kept rate {rate:.2f}) in about {hours:.1f} h at {jobs} jobs "
            "(the papers' test times differ: see the census's coverage seconds)"
        )


def _on_ray(chosen: Pset, plan: SynthPlan, scratch: Path) -> None:
    """``synth`` from scratch on one, then two single-CPU Ray worker nodes of this machine."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 0})
    rates: dict[int, float] = {}
    try:
        for nodes in (1, 2):
            cluster.add_node(num_cpus=1, resources={"rcb_sandbox": 1})
            cluster.wait_for_nodes()
            start = time.perf_counter()
            result = synthesize(
                chosen,
                plan.model_copy(update={"jobs": nodes}),
                scratch / f"ray-{nodes}",
                dispatcher_for(cluster.address),
            )
            wall = time.perf_counter() - start
            kept = len(result.manifest.snippets)
            rates[nodes] = kept / wall * 3600
            print(
                f"  ray, {nodes} worker node(s): {kept} verified of {result.candidates} "
                f"candidates in {wall:.0f} s ({rates[nodes]:.0f} per hour; stages "
                f"{result.stage_s})",
                flush=True,
            )
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
    if rates.get(1):
        print(f"  two nodes / one node: {rates[2] / rates[1]:.2f}x verified snippets per hour")


if __name__ == "__main__":
    main()
