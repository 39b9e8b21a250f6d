"""A run's episodes as ATIF trajectories (``rcb-env export --format atif RUN -o DIR``).

ATIF (the Agent Trajectory Interchange Format, v1.7, Harbor's ``harbor.models.trajectories``)
holds one agent run: the agent with its tool definitions, then numbered steps (``system``,
``user`` or ``agent``), an agent step with its message, its tool calls and the observation
(one result per call), and per-call metrics (token counts, prompt and completion token ids,
logprobs). rcb-env writes one file per episode of the run's records
(:func:`rcb_env.rl.export.load_records`: an RL run's ``trajectories.jsonl``, or an evaluation
run's ``episodes.jsonl``), each as its trajectory view (an evaluation's messages rebuilt): the
tokens where the model server returned them, and the grade in the root's ``extra`` (reward,
passed, status, stop reason, line weight, errors, and for an evaluation run the grader's
verdict with its per-test results). An unscored episode keeps ``reward: null``, never 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rcb_env.errors import ConfigError
from rcb_env.rl.export import load_records
from rcb_env.rl.trajectory import ModelTurn, Trajectory

__all__ = ["ATIF_VERSION", "export_atif", "to_atif"]

ATIF_VERSION = "ATIF-v1.7"


def _text(content: Any) -> str:
    """A chat message's content as text (a list of parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) and raw else {}
    except json.JSONDecodeError:
        return {"raw": raw}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _metrics(call: ModelTurn | None) -> dict[str, Any] | None:
    if call is None:
        return None
    metrics: dict[str, Any] = {
        "prompt_tokens": call.input_tokens or None,
        "completion_tokens": call.output_tokens or None,
        "prompt_token_ids": list(call.prompt_ids) if call.prompt_ids is not None else None,
        "completion_token_ids": (
            list(call.completion_ids) if call.completion_ids is not None else None
        ),
        "logprobs": list(call.logprobs) if call.logprobs is not None else None,
    }
    extra = {
        k: v
        for k, v in {
            "finish_reason": call.finish_reason,
            "weight_version": call.weight_version,
            "latency_s": call.latency_s or None,
        }.items()
        if v is not None
    }
    if extra:
        metrics["extra"] = extra
    metrics = {k: v for k, v in metrics.items() if v is not None}
    return metrics or None


def to_atif(
    t: Trajectory,
    *,
    session_id: str,
    agent: dict[str, Any] | None = None,
    grade: dict[str, Any] | None = None,
    model_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One trajectory as an ATIF document (a JSON object). ``agent``: the run's agent
    description (name, model), ``grade``: the grader's verdict when the run recorded it,
    ``model_calls``: the episode's model calls as recorded (an agent whose conversation rcb-env
    does not see, an agent CLI behind the proxy: their usage, cost and latency in ``extra``
    and the token totals)."""
    steps: list[dict[str, Any]] = []
    calls = list(t.calls)
    assistant_turn = 0
    messages = t.messages
    i = 0
    while i < len(messages):
        m = messages[i]
        role = m.get("role")
        if role == "assistant":
            step: dict[str, Any] = {"source": "agent", "message": _text(m.get("content"))}
            if m.get("reasoning_content"):
                step["reasoning_content"] = str(m["reasoning_content"])
            tool_calls = m.get("tool_calls") or []
            if tool_calls:
                step["tool_calls"] = [
                    {
                        "tool_call_id": str(c.get("id", "")),
                        "function_name": str((c.get("function") or {}).get("name", "")),
                        "arguments": _arguments((c.get("function") or {}).get("arguments")),
                    }
                    for c in tool_calls
                ]
            results = []
            while i + 1 < len(messages) and messages[i + 1].get("role") == "tool":
                i += 1
                tool = messages[i]
                results.append(
                    {
                        "source_call_id": tool.get("tool_call_id"),
                        "content": _text(tool.get("content")),
                    }
                )
            if results:
                step["observation"] = {"results": results}
            metrics = _metrics(calls[assistant_turn] if assistant_turn < len(calls) else None)
            if metrics:
                step["metrics"] = metrics
            step["llm_call_count"] = 1 if assistant_turn < len(calls) else 0
            assistant_turn += 1
            if not step["llm_call_count"]:
                del step["llm_call_count"]
        elif role == "tool":  # a tool message with no assistant turn before it
            step = {
                "source": "system",
                "message": "",
                "observation": {
                    "results": [
                        {"source_call_id": m.get("tool_call_id"), "content": _text(m["content"])}
                    ]
                },
            }
        else:
            step = {
                "source": "system" if role == "system" else "user",
                "message": _text(m.get("content")),
            }
        steps.append({"step_id": len(steps) + 1, **step})
        i += 1
    if not steps:
        steps.append({"step_id": 1, "source": "system", "message": "(no messages recorded)"})
    agent = agent or {}
    extra: dict[str, Any] = {
        "task_id": t.task_id,
        "paper_id": t.paper_id,
        "group_id": t.group_id,
        "sample": t.sample,
        "weight": t.weight,
        "reward": t.reward,
        "passed": t.passed,
        "status": t.status.value,
        "stop_reason": t.stop_reason.value,
        "attempts": t.attempts,
        "tokens": t.tokens,
        "errors": [e.model_dump(mode="json") for e in t.errors],
        "policy_version": t.policy_version,
    }
    if grade is not None:
        extra["grade"] = grade
    totals = _totals(len(steps), calls, model_calls or [])
    if model_calls:
        extra["model_calls"] = model_calls
        extra["cost_usd"] = round(sum(float(c.get("cost") or 0.0) for c in model_calls), 6)
    return {
        "schema_version": ATIF_VERSION,
        "session_id": session_id,
        "trajectory_id": f"{t.group_id}#{t.sample}",
        "agent": {
            "name": str(agent.get("name") or "rcb-env"),
            "version": str(agent.get("version") or "unknown"),
            **({"model_name": str(agent["model"])} if agent.get("model") else {}),
            "tool_definitions": t.tools,
        },
        "steps": steps,
        "final_metrics": totals,
        "extra": extra,
    }


def _totals(
    steps: int, calls: list[ModelTurn], model_calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """The final metrics: from the trajectory's model turns, or (an agent whose conversation
    is not recorded) from its recorded model calls."""
    totals: dict[str, Any] = {"total_steps": steps}
    if calls:
        totals["total_prompt_tokens"] = sum(c.input_tokens for c in calls)
        totals["total_completion_tokens"] = sum(c.output_tokens for c in calls)
    elif model_calls:
        usage = [c.get("usage") or {} for c in model_calls]
        totals["total_prompt_tokens"] = sum(int(u.get("input_tokens") or 0) for u in usage)
        totals["total_completion_tokens"] = sum(int(u.get("output_tokens") or 0) for u in usage)
        totals["total_cached_tokens"] = sum(int(u.get("cached_tokens") or 0) for u in usage)
    return totals


def _file_name(t: Trajectory, seen: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", t.task_id).strip("_") + f"__s{t.sample}"
    name, n = base, 1
    while name in seen:
        n += 1
        name = f"{base}__{n}"
    seen.add(name)
    return f"{name}.json"


def export_atif(run_dir: Path, dest: Path) -> list[Path]:
    """Write every episode of ``run_dir`` into the folder ``dest`` as an ATIF file. Returns
    the files written.

    Raises:
        ConfigError: not a run folder, or ``dest`` is a file.
    """
    records, _source = load_records(run_dir)
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"{dest} is a file: --format atif writes a folder of files")
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    seen: set[str] = set()
    for r in records:
        t = Trajectory.of(r)
        doc = to_atif(
            t,
            session_id=run_dir.name,
            agent=r.agent or None,
            grade=(
                r.grade.model_dump(mode="json", exclude={"stdout", "stderr"})
                if r.grade is not None
                else None
            ),
            model_calls=r.model_calls,
        )
        path = dest / _file_name(t, seen)
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written
