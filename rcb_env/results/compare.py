"""Compare runs on equal terms: same task set, same budgets and environment settings."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rcb_env.errors import ConfigError
from rcb_env.results.records import final_records, read_records
from rcb_env.results.summary import Summary, Totals, summarize, summarize_run

#: The key an imported run's manifest carries (rcb_env.results.imported).
IMPORTED = "imported"

#: Settings that must match for a fair comparison (agents and models may differ, of course).
_MUST_MATCH = ("budgets", "env", "samples", "grading")


class RunRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    run: str
    agent: str
    summary: Summary
    tokens: int
    cost: float
    mean_steps: float
    mean_wall_s: float


def _manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run folder (no run.json)")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _snippets_of(manifest: dict[str, Any]) -> set[str]:
    return {t.rsplit("@", 1)[0] if "@" in t else t for t in manifest.get("tasks", [])}


def compare(run_dirs: list[Path], *, force: bool = False) -> list[RunRow]:
    """One row per run. Imported runs (the paper's published results, ``import-results``) are
    rated on the snippets of the first run evaluated here, so every row is on the same snippets
    and weights; their full-benchmark rates use the whole benchmark.

    Raises:
        ConfigError: the runs differ in task set or budgets/settings and ``force`` is not set,
            or an imported run lacks some of the evaluated snippets.
    """
    manifests = [_manifest(d) for d in run_dirs]
    local = [(d, m) for d, m in zip(run_dirs, manifests, strict=True) if IMPORTED not in m]
    reference = local[0][1] if local else None
    if not force and len(local) > 1:
        first_dir, first = local[0]
        for d, m in local[1:]:
            if m["task_set_hash"] != first["task_set_hash"]:
                raise ConfigError(
                    f"{d} ran a different task set than {first_dir} (--force to compare)"
                )
            for key in _MUST_MATCH:
                if m["config"].get(key) != first["config"].get(key):
                    raise ConfigError(
                        f"{d} differs from {first_dir} in its {key} settings (--force to compare)"
                    )
    wanted = _snippets_of(reference) if reference is not None else None
    rows = []
    for d, m in zip(run_dirs, manifests, strict=True):
        records = list(final_records(read_records(d / "episodes.jsonl")).values())
        summary = summarize_run(d)
        if IMPORTED in m and wanted is not None:
            totals = None
            if reference is not None and reference.get("benchmark"):
                totals = Totals.model_validate(reference["benchmark"])
            # Imported results are one benchmark's: in a combined run, rate them on that part.
            have = {r.paper_id for r in records}
            part = next((t for t in (totals.parts if totals else ()) if have & set(t.papers)), None)
            scope = wanted
            if part is not None:
                scope = {w for w in wanted if w.split("/", 1)[0] in set(part.papers)}
                totals = part
            missing = scope - {r.snippet_id for r in records}
            if missing and not force:
                raise ConfigError(
                    f"{d} has no published result for {len(missing)} evaluated snippets "
                    f"(e.g. {sorted(missing)[0]})"
                )
            records = [r for r in records if r.snippet_id in scope]
            summary = summarize(records, totals)
        cfg = m["config"]
        model = (cfg.get("model") or {}).get("spec")
        rows.append(
            RunRow(
                run=d.name,
                agent=cfg["agent"] + (f" ({model})" if model else ""),
                summary=summary,
                tokens=sum(r.tokens for r in records),
                cost=round(sum(r.cost for r in records), 6),
                mean_steps=statistics.fmean([len(r.steps) for r in records]) if records else 0.0,
                mean_wall_s=statistics.fmean([r.duration_s for r in records]) if records else 0.0,
            )
        )
    return rows
