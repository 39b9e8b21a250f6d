"""One self-contained HTML file from one or more runs (and the paper's published results): a
leaderboard, plots, the snippet x run pass matrix, and a viewer for every episode.

The page works offline in any browser: its script and styles are inlined (``report_assets/``),
its plots are SVG drawn by that script, and nothing is fetched. The data rides in the page as
JSON: the runs, snippets and cells in one block, each episode's details gzipped (base64) in a
block of its own, unpacked by the browser (``DecompressionStream``) only when that episode is
opened, so a report of hundreds of episodes with long observations stays small and opens fast.
Task statements (which carry the paper) are stored once per distinct statement.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import itertools
import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rcb_env.errors import ConfigError
from rcb_env.results.compare import IMPORTED
from rcb_env.results.inference import Bootstrap, Estimate, SnippetScore, compare_pair, estimate
from rcb_env.results.inference import scores as snippet_scores
from rcb_env.results.records import RECORDS, RUN_FILE, EpisodeRecord, final_records, read_records
from rcb_env.results.summary import Rates, Summary, summarize, summarize_run
from rcb_env.task.difficulty import solve_rates
from rcb_env.task.selection import Subset

SCHEMA = "rcb-env/report/1"
ASSETS = Path(__file__).with_name("report_assets")
#: Longest text kept per observation, output or message in the page (the records keep it all).
MAX_TEXT = 6000
#: Settings that must match for two runs to be comparable (as ``compare`` requires).
MUST_MATCH = ("budgets", "env", "samples", "grading")


def run_dirs_of(paths: Iterable[Path]) -> list[Path]:
    """Each path as run folders: a run folder itself, or every run folder directly inside it.

    Raises:
        ConfigError: a path holds no run.
    """
    found: list[Path] = []
    for path in paths:
        if (path / RUN_FILE).is_file():
            found.append(path)
            continue
        inside = (
            sorted(p for p in path.iterdir() if (p / RUN_FILE).is_file()) if path.is_dir() else []
        )
        if not inside:
            raise ConfigError(f"{path} is neither a run folder nor a folder of runs (no run.json)")
        found.extend(inside)
    return found


def _clip(text: str | None, limit: int = MAX_TEXT) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit} more characters in the record)"


def _rates(
    r: Rates | None, scaled: Estimate | None = None, plain: Estimate | None = None
) -> dict[str, Any] | None:
    if r is None:
        return None
    out: dict[str, Any] = {
        "scaled": round(r.scaled, 4),
        "scaled_std": round(r.scaled_std, 4),
        "plain": round(r.plain, 4),
        "plain_std": round(r.plain_std, 4),
        "snippets": r.snippets,
        "passed": r.passed,
        "weight": r.weight,
    }
    for key, e in (("scaled_ci", scaled), ("plain_ci", plain)):
        if e is not None and e.low is not None and e.high is not None:
            out[key] = [round(e.low, 4), round(e.high, 4)]
    return out


def _ranking(runs: list[dict[str, Any]], scored: list[dict[str, SnippetScore]],
             boot: Bootstrap) -> None:  # fmt: skip
    """Rank the runs by their runnable scaled rate and test each against its neighbour below,
    paired by snippet (``compare``'s test, unadjusted): ``tied`` lists the neighbours whose
    difference is not significant at 5%."""
    ranked = sorted((i for i, r in enumerate(runs) if r["runnable"]),
                    key=lambda i: -runs[i]["runnable"]["scaled"])  # fmt: skip
    for position, i in enumerate(ranked, 1):
        runs[i]["rank"] = position
    for upper, lower in itertools.pairwise(ranked):
        pair = compare_pair(scored[upper], scored[lower], boot=boot)
        m = pair.metrics.get("scaled@1")
        if m is None or m.p_value is None:
            continue
        for i, j in ((upper, lower), (lower, upper)):
            runs[i]["neighbours"].append(
                {"run": j, "difference": round(m.difference if i == upper else -m.difference, 4),
                 "p": round(m.p_value, 4), "tied": not m.significant}
            )  # fmt: skip


def _items(snippets: list[dict[str, Any]], cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per snippet, its solve rate over every run that scored it (each run's pass@1 on it,
    averaged over the runs: :func:`rcb_env.task.difficulty.solve_rates`), with its size and
    nesting depth: the hardest last."""
    rates = solve_rates(
        (str(c["run"]), c["snippet"], c["outcome"] == "passed")
        for c in cells
        if c["outcome"] != "infra"
    )
    items = []
    for s in snippets:
        r = rates.get(s["id"])
        if r is None:
            continue
        items.append(
            {"snippet": s["id"], "paper": s["paper"], "weight": s["weight"], "depth": s["depth"],
             "solve_rate": round(100 * r.rate, 4), "runs": r.sources, "solved_by": r.solved_by,
             "kind": "nobody" if r.rate == 0 else "everybody" if r.rate == 1 else "separates"}
        )  # fmt: skip
    return sorted(items, key=lambda x: (-x["solve_rate"], x["snippet"]))


def _label(manifest: dict[str, Any], records: list[EpisodeRecord]) -> str:
    cfg = manifest.get("config", {})
    if IMPORTED in manifest:
        return str(records[0].agent.get("name") if records else cfg.get("agent"))
    model = (cfg.get("model") or {}).get("spec")
    return str(cfg.get("agent", "?")) + (f" ({model})" if model else "")


def _snippet_order(manifests: list[dict[str, Any]], ids: set[str]) -> list[dict[str, Any]]:
    """The snippets in the benchmark's own order (paper, then nesting), with depth and parent,
    from the first task set that loads; what it lacks follows in id order."""
    from rcb_env.task import load

    ordered: list[dict[str, Any]] = []
    seen: set[str] = set()
    for m in manifests:
        where = m.get("pset")
        if not where or IMPORTED in m:
            continue
        try:
            pset = load(where)
        except Exception:  # a moved or unfetched task set: fall back to the records' ids
            continue
        for s in pset.snippets:
            if s.id in ids and s.id not in seen:
                seen.add(s.id)
                ordered.append(
                    {"id": s.id, "paper": s.paper_id, "name": s.name, "weight": s.weight,
                     "depth": s.depth, "parent": s.parent}
                )  # fmt: skip
        break
    return ordered + [
        {"id": i, "paper": i.split("/", 1)[0], "name": i.split("/", 1)[1], "weight": None,
         "depth": 0, "parent": None}
        for i in sorted(ids - seen)
    ]  # fmt: skip


def _episode(record: EpisodeRecord, run: int, statements: dict[str, str]) -> dict[str, Any]:
    digest = hashlib.sha256(record.initial_observation.encode()).hexdigest()[:16]
    statements.setdefault(digest, _clip(record.initial_observation, 200_000))
    grade = record.grade
    return {
        "run": run,
        "episode_id": record.episode_id,
        "snippet": record.snippet_id,
        "sample": record.sample,
        "status": record.status,
        "reason": record.reason,
        "passed": record.passed,
        "reward": record.reward,
        "weight": record.weight,
        "agent": record.agent,
        "statement": digest,
        "steps": [
            {
                "index": s.index,
                "tool": s.action.get("tool") if isinstance(s.action, dict) else None,
                "action": _clip(json.dumps(s.action, indent=1)),
                "observation": _clip(s.observation),
                "duration_s": s.duration_s,
            }
            for s in record.steps
        ],
        "patch": _clip(record.patch, 60_000),
        "body": _clip(record.body),
        "outside_edits": record.outside_edits,
        "grade": None
        if grade is None
        else {
            "outcome": grade.outcome.value,
            "kind": grade.kind.value,
            "detail": grade.detail,
            "official_pass": grade.official_pass,
            "tests": [t.model_dump(mode="json") for t in grade.tests],
            "exit_code": grade.exit_code,
            "timed_out": grade.timed_out,
            "duration_s": grade.duration_s,
            "stdout": _clip(grade.stdout),
            "stderr": _clip(grade.stderr),
        },
        "infra_error": None if record.infra_error is None else record.infra_error.model_dump(),
        "model_calls": [_call(c) for c in record.model_calls],
        "tokens": record.tokens,
        "cost": record.cost,
        "duration_s": record.duration_s,
        "node": record.node,
        "attempt": record.attempt,
    }


def _call(call: dict[str, Any]) -> dict[str, Any]:
    usage = call.get("usage") or {}
    return {
        "step": call.get("step"),
        "model": call.get("model"),
        "input_tokens": usage.get("input_tokens", 0),
        "output_tokens": usage.get("output_tokens", 0),
        "cached_tokens": usage.get("cached_tokens", 0),
        "cost": call.get("cost", 0.0),
        "latency_s": call.get("latency_s", 0.0),
        "retries": call.get("retries", 0),
        "cached": call.get("cached", False),
        "error": call.get("error"),
    }


def _outcome(record: EpisodeRecord) -> str:
    if record.status == "infra_error":
        return "infra"
    return "passed" if record.passed else "failed"


def build(
    paths: Iterable[Path],
    *,
    published: Iterable[Path] = (),
    title: str = "",
    subset: Subset | None = None,
    strength: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report's data from runs (and imported published runs, listed after them). With
    ``subset``, each run's rates on it too (the leaderboard can switch to them); with
    ``strength`` (a ``validate --mutants --json`` document), each snippet's mutation score and a
    surviving mutant's diff.

    Raises:
        ConfigError: a path holds no run.
    """
    dirs = run_dirs_of(paths)
    dirs += [d for d in run_dirs_of(published) if d not in dirs]
    manifests = [json.loads((d / RUN_FILE).read_text()) for d in dirs]
    all_records = [
        sorted(final_records(read_records(d / RECORDS)).values(),
               key=lambda r: (r.snippet_id, r.sample))
        for d in dirs
    ]  # fmt: skip
    local = [i for i, m in enumerate(manifests) if IMPORTED not in m]
    reference = manifests[local[0]] if local else None
    ref_snippets = {r.snippet_id for r in all_records[local[0]]} if local else set()
    statements: dict[str, str] = {}
    runs: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []
    cells: list[dict[str, Any]] = []
    scored: list[dict[str, SnippetScore]] = []
    boot = Bootstrap()
    for i, (d, m, records) in enumerate(zip(dirs, manifests, all_records, strict=True)):
        summary: Summary = summarize_run(d)
        imported = IMPORTED in m
        cfg = m.get("config", {})
        runnable = summary.overall
        scope = records
        if imported and ref_snippets:  # rated on the snippets run here too
            scope = [r for r in records if r.snippet_id in ref_snippets]
            runnable = summarize(scope).overall if scope else None
        on_subset = summarize(scope, subset=subset).subset if subset is not None else None
        score = snippet_scores(scope)
        scored.append(score)
        scaled_ci = estimate(score, "scaled", boot=boot)
        plain_ci = estimate(score, "plain", boot=boot)
        per_paper_ci = {}
        every = snippet_scores(records) if scope is not records else score
        for paper in summary.per_paper:  # (over all of a run's snippets, as the bars are)
            inside = {k: v for k, v in every.items() if v.paper == paper}
            e = estimate(inside, "scaled", boot=boot, by="snippet")
            if e is not None and e.low is not None and e.high is not None:
                per_paper_ci[paper] = [round(e.low, 4), round(e.high, 4)]
        full = summary.full if not imported else summary.overall
        comparable, why = True, ""
        if imported and local and not ({r.snippet_id for r in records} & ref_snippets):
            comparable, why = False, "another benchmark"
        if not imported and reference is not None and m is not reference:
            if m.get("task_set_hash") != reference.get("task_set_hash"):
                comparable, why = False, "a different task set"
            else:
                differ = [k for k in MUST_MATCH if cfg.get(k) != reference["config"].get(k)]
                if differ:
                    comparable, why = False, "different " + ", ".join(differ) + " settings"
        runs.append(
            {
                "id": d.name,
                "label": _label(m, records),
                "kind": "published" if imported else "local",
                "agent": cfg.get("agent"),
                "model": (cfg.get("model") or {}).get("spec"),
                "samples": summary.samples,
                "runnable": _rates(runnable, scaled_ci, plain_ci),
                "subset": _rates(on_subset.rates) if on_subset is not None else None,
                "full": _rates(full),
                "full_snippets": summary.totals.snippets if summary.totals else None,
                "per_paper": {p: round(r.scaled, 4) for p, r in summary.per_paper.items()},
                "per_paper_ci": per_paper_ci,
                "episodes": summary.episodes,
                "tokens": sum(r.tokens for r in records),
                "cost": round(sum(r.cost for r in records), 6),
                "mean_steps": round(statistics.fmean(len(r.steps) for r in records), 2)
                if records
                else 0.0,
                "wall_s": round(sum(r.duration_s for r in records), 2),
                "infra_errors": summary.infra_errors,
                "truncated": summary.truncated,
                "budgets": cfg.get("budgets"),
                "comparable": comparable,
                "not_comparable_because": why,
                "rank": None,
                "neighbours": [],
            }
        )
        for r in records:
            ep = None
            if not imported:
                ep = len(episodes)
                episodes.append(_episode(r, i, statements))
            cells.append(
                {"run": i, "snippet": r.snippet_id, "sample": r.sample, "outcome": _outcome(r),
                 "status": r.status, "episode": ep, "weight": r.weight}
            )  # fmt: skip
    ids = {c["snippet"] for c in cells if not (runs[c["run"]]["kind"] == "published" and local)}
    if local:  # published rows on the snippets run here; the rest of theirs stays in the board
        ids |= ref_snippets
    snippets = _snippet_order([manifests[i] for i in local], ids)
    weights = {c["snippet"]: c["weight"] for c in cells}
    for s in snippets:
        s["weight"] = s["weight"] if s["weight"] is not None else weights.get(s["id"])
    keep = {s["id"] for s in snippets}
    kept = [c for c in cells if c["snippet"] in keep]
    _ranking(runs, scored, boot)
    tested = _strength(strength)
    for s in snippets:
        s["strength"] = tested.get(s["id"])
        if subset is not None:
            s["in_subset"] = s["id"] in subset.ids
    return {
        "schema": SCHEMA,
        "title": title or "rcb-env report",
        "bootstrap": {"resamples": boot.resamples, "seed": boot.seed, "level": boot.level},
        "runs": runs,
        "snippets": snippets,
        "papers": list(dict.fromkeys(s["paper"] for s in snippets)),
        "cells": kept,
        "items": _items(snippets, kept),
        "episodes": episodes,
        "statements": statements,
        "subset": None
        if subset is None
        else {"name": subset.name, "criteria": subset.criteria, "snippets": len(subset.snippets)},
    }


def _strength(doc: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per snippet id: its mutation score, counts and first surviving mutant."""
    out: dict[str, dict[str, Any]] = {}
    for s in (doc or {}).get("snippets", ()):
        # a test gap first: it shows what the test misses (an equivalent one shows nothing)
        survivors = sorted(s.get("survivors") or [], key=lambda v: v.get("kind") != "test gap")
        out[s["id"]] = {
            "score": s.get("score"),
            "killed": s.get("killed", 0),
            "survived": s.get("survived", 0),
            "survivor": survivors[0] if survivors else None,
        }
    return out


def _json_block(element_id: str, data: Any, kind: str = "application/json") -> str:
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return f'<script type="{kind}" id="{element_id}">{text}</script>'


def _packed(data: Any) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode()


def _search_text(ep: dict[str, Any], run_label: str) -> str:
    grade = ep.get("grade") or {}
    infra = ep.get("infra_error") or {}
    tools = " ".join(s["tool"] or "" for s in ep["steps"])
    return " ".join(
        str(x)
        for x in (ep["snippet"], run_label, ep["status"], ep["reason"], grade.get("detail", ""),
                  infra.get("message", ""), tools, ep["patch"][:2000])
    ).lower()  # fmt: skip


def render(data: dict[str, Any]) -> str:
    """The report as one HTML document (script, styles and data inline)."""
    episodes = data["episodes"]
    labels = [r["label"] for r in data["runs"]]
    index = {k: v for k, v in data.items() if k not in ("episodes", "statements")}
    index["episode_index"] = [
        {
            "run": ep["run"],
            "snippet": ep["snippet"],
            "sample": ep["sample"],
            "outcome": "infra"
            if ep["status"] == "infra_error"
            else ("passed" if ep["passed"] else "failed"),
            "status": ep["status"],
            "reward": ep["reward"],
            "steps": len(ep["steps"]),
            "tokens": ep["tokens"],
            "text": _search_text(ep, labels[ep["run"]]),
        }
        for ep in episodes
    ]
    blocks = [_json_block("rcb-data", index)]
    blocks += [
        f'<script type="application/gzip+base64" id="ep-{i}">{_packed(ep)}</script>'
        for i, ep in enumerate(episodes)
    ]
    blocks += [
        f'<script type="application/gzip+base64" id="st-{key}">{_packed(text)}</script>'
        for key, text in data["statements"].items()
    ]
    css = (ASSETS / "report.css").read_text()
    js = (ASSETS / "report.js").read_text().replace("</", "<\\/")
    title = html.escape(data["title"])
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title>"
        f"<style>{css}</style></head><body>"
        + (ASSETS / "report.html").read_text().replace("{{title}}", title)
        + "".join(blocks)
        + f"<script>{js}</script></body></html>\n"
    )


def write(
    paths: Iterable[Path],
    out: Path,
    *,
    published: Iterable[Path] = (),
    title: str = "",
    subset: Subset | None = None,
    strength: dict[str, Any] | None = None,
) -> Path:
    """Build and write the report; its path."""
    data = build(paths, published=published, title=title, subset=subset, strength=strength)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text(render(data), encoding="utf-8")
    tmp.replace(out)
    return out
