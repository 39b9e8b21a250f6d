"""The wire contract of ``rcb-env serve``: OpenEnv's ``/ws`` session frames, as its 0.3.0 client
sends and reads them, with rcb-env's additions (each answer carries an ``id``; two more error
codes). Nothing here is taken from OpenEnv's code: the frame shapes are a wire format, written
down from what its client sends and reads.

Client to server: ``{"type": "reset", "data": {"task_id"?, "seed"?, "episode_id"?}}``,
``{"type": "step", "data": {<an action, the same JSON as everywhere>, "metadata"?: {...}}}``,
``{"type": "state"}``, ``{"type": "close"}``; each may carry a top-level ``"id"``.

Server to client: ``{"type": "observation", "id": ..., "data": {"observation": {...}, "reward":
r, "done": d}}``, ``{"type": "state", "id": ..., "data": {...}}``, ``{"type": "error", "id": ...,
"data": {"message": ..., "code": ...}}``. An error frame never closes the session.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from rcb_env.episode.outcome import EpisodeStatus
from rcb_env.tools.actions import Action, tool_specs

__all__ = [
    "ErrorCode",
    "ServedObservation",
    "ServedState",
    "action_schema",
    "error_frame",
    "observation_frame",
    "schema",
    "state_frame",
]


class ErrorCode(StrEnum):
    """Why a frame was refused (OpenEnv's codes, same meanings, and rcb-env's two)."""

    INVALID_JSON = "INVALID_JSON"
    """The frame is not JSON."""
    VALIDATION_ERROR = "VALIDATION_ERROR"
    """The frame is JSON but not a frame of the protocol (or a reset names no such task)."""
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    """The frame's ``type`` is none of the protocol's."""
    EXECUTION_ERROR = "EXECUTION_ERROR"
    """The server failed answering it (a programming error: reported, the session kept)."""
    CAPACITY_REACHED = "CAPACITY_REACHED"
    """A reset beyond the server's open-episode cap (retry the reset later, same socket)."""
    SESSION_ERROR = "SESSION_ERROR"
    """A frame too large or not text."""
    NO_EPISODE = "NO_EPISODE"
    """rcb-env: a step before any reset."""
    DRAINING = "DRAINING"
    """rcb-env: the server is shutting down and starts no episode."""


Status = Literal["running"] | EpisodeStatus
"""``running``, then how the episode ended: the one status vocabulary of records and outcomes."""


class ServedObservation(BaseModel):
    """What a reset or a step answers (the frame's ``observation``; ``reward`` and ``done`` sit
    beside it in the frame). OpenEnv's client drops an observation's ``metadata``, so everything
    a trainer needs is a field here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    """The tool's observation (at a reset: the task statement)."""
    episode_id: str
    task_id: str
    """``<paper>/<snippet>``."""
    step: int
    """Steps taken so far in the episode."""
    status: Status
    """``running``; at the end how it ended: ``completed`` (submitted), ``truncated`` (a budget
    or the server ended it), ``infra_error`` (the infrastructure failed: not scored)."""
    reason: str | None = None
    """Why it ended (``submit``, ``budget_steps``, ``agent_stopped``, ``infra_error``)."""
    scored: bool | None = None
    """At the end: whether the reward counts (False: an infrastructure failure; reward null)."""
    passed: bool | None = None
    """At the end: the tests passed."""
    weight: int
    """The snippet's line weight."""
    tool_ok: bool = True
    """False when the action was malformed (the text says why; the step counted)."""
    budgets: dict[str, float | None] = {}
    """What is left of each budget (null: unlimited)."""
    tools: list[dict[str, Any]] | None = None
    """Answering ``list_tools``: the tools' names, descriptions and JSON schemas."""
    tool_name: str | None = None
    """Answering ``call_tool`` (the step of OpenEnv's ``MCPToolClient``): the tool called; its
    observation is ``result``, or, for a malformed call, ``error``."""
    result: str | None = None
    error: dict[str, str] | None = None
    """OpenEnv's ``ToolError``: ``error_type`` (``invalid_args``) and ``message``."""


_SENT_WHEN_SET = frozenset({"tools", "tool_name", "result", "error"})
"""Fields absent from an answer unless set (OpenEnv's MCP client reads an observation with a
``tools`` key as a tool list and one with ``tool_name`` as a tool call's answer)."""


class ServedState(BaseModel):
    """What ``state`` answers: cheap, never touching the sandbox."""

    model_config = ConfigDict(frozen=True, extra="allow")

    episode_id: str | None = None
    step_count: int = 0
    task_id: str | None = None
    status: Status | None = None
    done: bool = False
    reward: float | None = None
    scored: bool | None = None


class _StepData(BaseModel):
    """A step's ``data``: one action (validated by the episode, as every door does) and the
    optional ``metadata`` of OpenEnv's action base."""

    model_config = ConfigDict(extra="allow")

    metadata: dict[str, Any] = {}


def action_schema() -> dict[str, Any]:
    """The JSON schema of a step's ``data``: one of the typed actions (the same models every
    front door uses), plus the optional ``metadata`` object."""
    schema = TypeAdapter(Action).json_schema()
    schema["description"] = (
        "One tool action: {'tool': <name>, ...its arguments}; optional 'metadata' (an object)."
    )
    return schema


def schema() -> dict[str, Any]:
    """``/schema``: the action, observation and state schemas."""
    return {
        "action": action_schema(),
        "observation": ServedObservation.model_json_schema(),
        "state": ServedState.model_json_schema(),
        "tools": [t.model_dump() for t in tool_specs()],
    }


def _framed(kind: str, data: dict[str, Any], frame_id: str) -> dict[str, Any]:
    return {"type": kind, "id": frame_id, "data": data}


def observation_frame(
    obs: ServedObservation, reward: float | None, done: bool, frame_id: str
) -> dict[str, Any]:
    return _framed(
        "observation",
        {
            "observation": obs.model_dump(
                mode="json", exclude={k for k in _SENT_WHEN_SET if getattr(obs, k) is None}
            ),
            "reward": reward,
            "done": done,
        },
        frame_id,
    )


def state_frame(state: ServedState, frame_id: str) -> dict[str, Any]:
    return _framed("state", state.model_dump(mode="json"), frame_id)


def error_frame(code: ErrorCode, message: str, frame_id: str) -> dict[str, Any]:
    return _framed("error", {"message": message, "code": code.value}, frame_id)
