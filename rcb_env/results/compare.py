"""Compare runs on equal terms: same task set, same budgets and environment settings."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rcb_env.errors import ConfigError
from rcb_env.results.records import final_records, read_records
from rcb_env.results.summary import Summary, summarize

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


def compare(run_dirs: list[Path], *, force: bool = False) -> list[RunRow]:
    """One row per run.

    Raises:
        ConfigError: the runs differ in task set or budgets/settings and ``force`` is not set.
    """
    manifests = [_manifest(d) for d in run_dirs]
    if not force and len(manifests) > 1:
        first = manifests[0]
        for d, m in zip(run_dirs[1:], manifests[1:], strict=True):
            if m["task_set_hash"] != first["task_set_hash"]:
                raise ConfigError(
                    f"{d} ran a different task set than {run_dirs[0]} (--force to compare)"
                )
            for key in _MUST_MATCH:
                if m["config"].get(key) != first["config"].get(key):
                    raise ConfigError(
                        f"{d} differs from {run_dirs[0]} in its {key} settings (--force to compare)"
                    )
    rows = []
    for d, m in zip(run_dirs, manifests, strict=True):
        records = list(final_records(read_records(d / "episodes.jsonl")).values())
        cfg = m["config"]
        model = (cfg.get("model") or {}).get("spec")
        rows.append(
            RunRow(
                run=d.name,
                agent=cfg["agent"] + (f" ({model})" if model else ""),
                summary=summarize(records),
                tokens=sum(r.tokens for r in records),
                cost=round(sum(r.cost for r in records), 6),
                mean_steps=statistics.fmean([len(r.steps) for r in records]) if records else 0.0,
                mean_wall_s=statistics.fmean([r.duration_s for r in records]) if records else 0.0,
            )
        )
    return rows
