# /// script
# requires-python = ">=3.8"
# dependencies = []
# ///
"""The paper's two rates, written once: ``rcb-env summary`` computes them with
:func:`pass_rates`, and an exported Harbor dataset ships this file as its ``metric.py``
(``rcb-env export harbor``), so that ``harbor run`` prints the same numbers.

Over the scored snippets s (an infrastructure failure is not scored), with L_s the line weight
and p_s the pass flag: scaled = 100 * sum(L_s p_s) / sum(L_s), plain = 100 * sum(p_s) / n.

As Harbor's dataset metric (``uv run metric.py -i rewards.jsonl -o metric.json``): each input
line is one trial's reward dictionary as the exported verifier writes it (``reward``: the
line weight on a pass, else 0; ``weight``; ``passed``: 1 or 0), or ``null`` for a trial
without a reward. A trial without a reward is an infrastructure failure (the verifier writes
none for one, so Harbor records a verifier error): it is left out of both rates and counted
(``infra_errors``, shown only when there is one), never scored 0. Harbor 0.26 hands a metric
only the trials with a valid reward and counts the others itself (its ``Exceptions``).

Standard library only: Harbor runs it with whatever Python ``uv`` finds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any


def pass_rates(scored: Iterable[tuple[int, bool]]) -> tuple[float, float] | None:
    """(scaled, plain) in percent over ``(line weight, passed)`` pairs of scored snippets;
    None when there is none. Weights summing to 0 give a scaled rate of 0."""
    pairs = list(scored)
    if not pairs:
        return None
    total = sum(w for w, _ in pairs)
    good_w = sum(w for w, p in pairs if p)
    good = sum(1 for _, p in pairs if p)
    return (100.0 * good_w / total if total else 0.0), 100.0 * good / len(pairs)


def harbor_metric(rewards: list[dict[str, Any] | None]) -> dict[str, float | int]:
    """The metric of a Harbor job's trials (their reward dictionaries, None for none).

    Raises:
        ValueError: a reward dictionary that this export's verifier did not write.
    """
    scored: list[tuple[int, bool]] = []
    infra = 0
    for reward in rewards:
        if reward is None:
            infra += 1
            continue
        if not {"weight", "passed"} <= set(reward):
            raise ValueError(
                f"a reward without weight and passed ({sorted(reward)}): not a task of an "
                "rcb-env export"
            )
        scored.append((int(reward["weight"]), bool(reward["passed"])))
    rates = pass_rates(scored)
    metric: dict[str, float | int] = (
        {} if rates is None else {"scaled": rates[0], "plain": rates[1]}
    )
    metric.update(
        {
            "scored": len(scored),
            "passed": sum(1 for _, p in scored if p),
            "weight": sum(w for w, _ in scored),
            "passed_weight": sum(w for w, p in scored if p),
        }
    )
    if infra:  # Harbor 0.26 hands a metric only trials with a reward: it counts the others
        metric["infra_errors"] = infra
    return metric


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="rcb-env's rates as a Harbor dataset metric")
    parser.add_argument("-i", "--input-path", required=True)
    parser.add_argument("-o", "--output-path", required=True)
    args = parser.parse_args(argv)
    with open(args.input_path, encoding="utf-8") as f:
        rewards = [json.loads(line) for line in f if line.strip()]
    with open(args.output_path, "w", encoding="utf-8") as f:
        json.dump(harbor_metric(rewards), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
