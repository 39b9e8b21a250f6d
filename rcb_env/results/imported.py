"""The paper's own results as rcb-env runs: ResearchCodeBench's ``overall_stats.json`` (per model,
per paper, per snippet: ``passed`` and ``snippet_code_line_count`` for each completion) becomes
one run folder per model, marked as imported (no trajectories, greedy samples as published), so
that ``summary`` and ``compare`` put the paper's models beside agents evaluated here, on the same
snippets and weights, through the same formulas.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from rcb_env.episode.outcome import EpisodeStatus, StopReason
from rcb_env.errors import ConfigError
from rcb_env.results.records import RECORDS, RUN_FILE, EpisodeRecord, RecordLog, write_json_atomic
from rcb_env.results.summary import Summary, Totals, summarize_run
from rcb_env.task.difficulty import published_samples
from rcb_env.task.models import Pset

IMPORTED = StopReason.IMPORTED.value


class ImportedModel(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    """The file's key, e.g. ``GEMINI_2_5_PRO_PREVIEW_05_06``."""
    pretty_name: str
    run_dir: Path
    summary: Summary
    published_scaled: float | None
    """The file's own ``overall_scores`` line rate (to check our formulas against)."""
    published_plain: float | None
    weight_mismatches: int
    """Snippets whose published line count differs from rcb-env's weight (should be 0)."""


def _slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model)


def import_results(
    stats_file: Path,
    runs_root: Path,
    *,
    pset: Pset | None = None,
    benchmark: str = "researchcodebench",
) -> list[ImportedModel]:
    """Write one run folder per model of ``stats_file`` under ``runs_root`` (replacing earlier
    imports of the same models) and return each with its summary.

    With ``pset`` (the benchmark as loaded here), every published snippet must be one of its
    snippets and the weights are rcb-env's; without it, the file's line counts are used.

    Raises:
        ConfigError: the file is not a results file of this shape, or names unknown snippets.
    """
    per_model: dict[str, list[dict[str, Any]]] = {}
    for row in published_samples(stats_file):
        per_model.setdefault(row["model"], []).append(row)
    overall: dict[str, Any] = json.loads(stats_file.read_text()).get("overall_scores", {})
    known = {s.id: s for s in pset.snippets} if pset is not None else {}
    imported = []
    source_hash = hashlib.sha256(stats_file.read_bytes()).hexdigest()[:16]
    for model, rows in sorted(per_model.items()):
        run_dir = runs_root / f"{IMPORTED}-{_slug(model)}"
        run_dir.mkdir(parents=True, exist_ok=True)
        records_path = run_dir / RECORDS
        records_path.unlink(missing_ok=True)
        pretty = overall.get(model, {}).get("llm_cfg", {}).get("pretty_name") or model
        mismatches = 0
        log = RecordLog(records_path).open()
        try:
            for row in rows:
                sid = f"{row['paper']}/{row['snippet']}"
                count = int(row.get("snippet_code_line_count", 0))
                if known:
                    if sid not in known:
                        raise ConfigError(f"{stats_file}: {sid} is not a snippet of {benchmark}")
                    weight = known[sid].weight
                    mismatches += weight != count
                else:
                    weight = count
                passed = bool(row.get("passed"))
                sample = int(row.get("completion_idx", 0))
                log.append(
                    EpisodeRecord(
                        run_id=run_dir.name,
                        episode_id=f"{sid}#{sample}",
                        snippet_id=sid,
                        paper_id=row["paper"],
                        sample=sample,
                        weight=weight,
                        task_hash="",
                        agent={"name": pretty, "model": model, IMPORTED: True},
                        config={},
                        status=EpisodeStatus.COMPLETED,
                        reason=StopReason.IMPORTED,
                        reward=float(weight) if passed else 0.0,
                        passed=passed,
                        initial_observation="",
                        steps=[],
                        started_at=0.0,
                        duration_s=0.0,
                    )
                )
        finally:
            log.close()
        snippet_ids = sorted({f"{r['paper']}/{r['snippet']}" for r in rows})
        totals = Totals(
            name=benchmark,
            snippets=len(known) if known else len(snippet_ids),
            weight=sum(s.weight for s in known.values()) if known else 0,
        )
        if not known:
            weights = {
                f"{r['paper']}/{r['snippet']}": int(r.get("snippet_code_line_count", 0))
                for r in rows
            }
            totals = totals.model_copy(update={"weight": sum(weights.values())})
        write_json_atomic(
            run_dir / RUN_FILE,
            {
                "schema_version": "rcb-env/run/1",
                "run_id": run_dir.name,
                "created": dt.datetime.now(dt.UTC).isoformat(),
                "pset": benchmark,
                IMPORTED: {"file": str(stats_file), "sha256": source_hash, "model": model},
                "config": {"agent": f"{IMPORTED}:{pretty}", "samples": 1},
                "tasks": snippet_ids,
                "task_set_hash": hashlib.sha256("\n".join(snippet_ids).encode()).hexdigest()[:16],
                "benchmark": totals.model_dump(mode="json"),
            },
        )
        line = overall.get(model, {}).get("line_rates", {}).get("mean")
        task = overall.get(model, {}).get("task_rates", {}).get("mean")
        imported.append(
            ImportedModel(
                model=model,
                pretty_name=pretty,
                run_dir=run_dir,
                summary=summarize_run(run_dir),
                published_scaled=line,
                published_plain=task,
                weight_mismatches=mismatches,
            )
        )
    return imported
