"""The runner's side of an agent that lives outside the runner's loop (an MCP client, a
framework running its own agent loop): an :class:`~rcb_env.agent.Agent` whose ``act`` waits for
the outside agent's next tool call, and whose observation becomes that call's answer. The
episode is run by the ordinary runner, so it is graded, budgeted and recorded as a native one.
Standard library only."""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rcb_env.agent import OutOfBudget
from rcb_env.tools.actions import Action, Submit, ToolSpec, tool_specs

#: What a call after the end of the episode gets back (a tool error).
ENDED = (
    "error: the episode has ended ({how}); no more tools run. Its outcome was recorded: disconnect."
)


@dataclass
class _Call:
    """One tool call from the client, answered by the episode thread."""

    action: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    text: str = ""
    is_error: bool = False

    def answer(self, text: str, is_error: bool) -> None:
        self.text, self.is_error = text, is_error
        self.done.set()


class EpisodeBridge:
    """The agent the runner drives for an MCP client: each ``act`` is the client's next tool
    call; each observation is the answer to the call before it.

    The runner's thread calls :meth:`start`, :meth:`act`, :meth:`end`; the server's handlers
    call :meth:`call` (blocking: run it in a worker thread) and :meth:`disconnect`.
    """

    name = "mcp"

    def __init__(self, label: str = "mcp") -> None:
        self.label = label
        self.statement = ""
        self.tools: list[ToolSpec] = tool_specs()
        self.ready = threading.Event()
        """Set once the episode has started (the statement is known)."""
        self.ended = threading.Event()
        """Set once the episode has ended (graded, or failed)."""
        self.how = ""
        self._calls: queue.Queue[_Call | None] = queue.Queue()
        self._pending: _Call | None = None
        self._lock = threading.Lock()
        self.calls = 0

    # the runner's side ---------------------------------------------------------------------
    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        self.statement = observation
        self.tools = list(tools)
        self.ready.set()

    def act(self, observation: str, info: dict[str, Any]) -> Action | dict[str, Any] | str:
        if self._pending is not None:
            self._pending.answer(observation, info.get("tool_ok") is False)
            self._pending = None
        left = (info.get("budgets") or {}).get("wall_s")
        try:
            call = self._calls.get(timeout=None if left is None else max(0.0, float(left)))
        except queue.Empty:
            raise OutOfBudget("budget_wall_s") from None
        if call is None:  # the client went away without submitting
            return self.left()
        self._pending = call
        return call.action

    def left(self) -> Action | dict[str, Any] | str:
        """The action once the outside agent has gone without submitting: grade the workspace
        as it stands (a subclass may raise instead, when the agent was stopped by a failure
        of the infrastructure)."""
        return Submit()

    def end(self, info: dict[str, Any]) -> None:
        outcome = info.get("outcome")
        reason = getattr(outcome, "reason", None)
        self.how = str(getattr(reason, "value", reason) or info.get("status") or "ended")
        with self._lock:
            self.ended.set()
        if self._pending is not None:
            final = str(info.get("observation", ""))
            self._pending.answer(f"{final}\n[episode ended: {self.how}]", False)
            self._pending = None
        self.ready.set()  # a client waiting for a start that failed is released
        self._refuse_waiting()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "client": self.label, "tool_calls": self.calls}

    # the server's side ----------------------------------------------------------------------
    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Run one tool call through the episode: its observation and whether it is an
        error. Blocks until the episode answers."""
        with self._lock:
            if self.ended.is_set():
                return ENDED.format(how=self.how), True
            call = _Call(action={**arguments, "tool": tool})
            self.calls += 1
            self._calls.put(call)
        while not call.done.wait(0.5):
            if self.ended.is_set() and not call.done.is_set():
                # answered by end() or refused below; re-check once the runner is done with it
                self._refuse_waiting()
        return call.text, call.is_error

    def disconnect(self) -> None:
        """The client has gone: the episode ends as its workspace stands (unless it already
        ended)."""
        self._calls.put(None)

    def _refuse_waiting(self) -> None:
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                return
            if call is not None:
                call.answer(ENDED.format(how=self.how), True)
