"""The episodes of one ``rcb-env serve`` process: admission (a cap on open episodes and one on
connections), one session per socket running one episode at a time through the one driver
(:class:`~rcb_env.episode.driver.Episode`, the pull shape) over the process's shared sandbox
factory and grading pool, an idle reaper and a wall clock per episode, the drain at shutdown,
and a record per episode in the server's run folder (the folder ``rcb-env eval`` writes, so
``summary``, ``compare``, ``report`` and ``export`` read it).

A session answers every frame once, in order (its frames are handled one after another), and
never sends a frame it was not asked for: OpenEnv's 0.3.0 client reads the next frame as the
answer to its last request. Failures of the infrastructure are data: the observation says the
episode is not scored and its reward is null, never 0.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rcb_env.episode.driver import ENDED, Episode
from rcb_env.episode.outcome import EpisodeOutcome, StopReason
from rcb_env.errors import InfraError
from rcb_env.integrations.serve.protocol import (
    ErrorCode,
    ServedObservation,
    ServedState,
    error_frame,
    observation_frame,
    state_frame,
)
from rcb_env.logs import get_logger
from rcb_env.results.ledger import EVENTS, episode_key, eval_ledger
from rcb_env.results.records import RECORDS, read_records
from rcb_env.rl import shared
from rcb_env.runner.episode import EvalConfig, episode_record
from rcb_env.runner.eval import open_run
from rcb_env.task.models import Paper, Pset, Snippet
from rcb_env.tools.actions import tool_specs

__all__ = ["EpisodeServer", "Refused", "ServeLimits", "ServedSession"]

log = get_logger(__name__)


class ServeLimits(BaseModel):
    """How much one server holds, and for how long."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_episodes: int = Field(64, ge=1)
    """Episodes open at once (each holds a sandbox); a reset beyond is refused with
    CAPACITY_REACHED, the socket kept."""
    max_connections: int | None = Field(None, ge=1)
    """Sockets open at once (default: four times max_episodes); a connection beyond is refused
    at the handshake (HTTP 503)."""
    idle_s: float = Field(600.0, gt=0)
    """An episode whose client sends nothing this long is ended (graded as it stands,
    agent_stopped); the socket is kept."""
    episode_wall_s: float = Field(3600.0, gt=0)
    """An episode open this long is ended (graded as it stands, budget_wall_s)."""
    drain_s: float = Field(30.0, ge=0)
    """At SIGTERM: how long running episodes may go on before they are recorded as
    interrupted (unscored)."""

    @property
    def connections(self) -> int:
        return self.max_connections or 4 * self.max_episodes


class Refused(Exception):
    """A frame the server answers with an error (the session is kept)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Reset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str | None = None
    seed: int | None = Field(None, ge=0)
    episode_id: str | None = Field(None, max_length=255)


class EpisodeServer:
    """The episodes of one server process over the selection ``pset`` (its runnable part),
    recorded in ``run_dir``."""

    def __init__(
        self,
        pset: Pset,
        cfg: EvalConfig,
        run_dir: Path,
        limits: ServeLimits | None = None,
    ) -> None:
        self.limits = limits or ServeLimits()
        self.cfg = cfg
        self.run_dir = run_dir
        self.pset, self.run_id = open_run(pset, cfg, run_dir)
        self.tasks: dict[str, tuple[Paper, Snippet]] = {
            s.id: (p, s) for p in self.pset.papers for s in p.snippets
        }
        self.task_ids = sorted(self.tasks)
        self.factory = shared.shared_factory(cfg.sandbox)
        self.ledger = eval_ledger(run_dir / RECORDS)
        self._samples = _next_samples(run_dir)
        self.executor = ThreadPoolExecutor(
            max_workers=min(self.limits.max_episodes, 64) + 2, thread_name_prefix="rcb-serve"
        )
        self.journal = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rcb-serve-ledger")
        """Forces the ledger's started lines to disk, off the resets' path."""
        self._lock = threading.Lock()
        self.open_episodes = 0
        self.sessions: set[ServedSession] = set()
        """The sessions of open sockets."""
        self.held: dict[str, ServedSession] = {}
        """The sessions without a socket, by key: HTTP-held episodes (``POST /reset`` and
        ``/step``, by episode id) and MCP sessions (``/mcp``); each forgotten once its episode
        has ended and it has been idle ``idle_s``."""
        self.draining = False
        self.served = Counter[str]()
        """Episodes ended, by status."""

    # admission ------------------------------------------------------------------------------
    def refusal(self) -> tuple[ErrorCode, str] | None:
        """Why a new connection is refused now (None: it is welcome)."""
        if self.draining:
            return ErrorCode.DRAINING, "the server is shutting down; connect to another"
        if len(self.sessions) >= self.limits.connections:
            return (
                ErrorCode.CAPACITY_REACHED,
                f"the server holds {self.limits.connections} connections, its cap; retry later",
            )
        return None

    def connect(self, client: dict[str, Any]) -> ServedSession:
        session = ServedSession(self, client)
        self.sessions.add(session)
        return session

    def _claim(self) -> None:
        with self._lock:
            if self.draining:
                raise Refused(ErrorCode.DRAINING, "the server is shutting down; no new episode")
            if self.open_episodes >= self.limits.max_episodes:
                raise Refused(
                    ErrorCode.CAPACITY_REACHED,
                    f"{self.open_episodes} episodes are open, the server's cap "
                    f"({self.limits.max_episodes}); retry the reset later",
                )
            self.open_episodes += 1

    def _release(self) -> None:
        with self._lock:
            self.open_episodes -= 1

    def _sample(self, snippet_id: str) -> int:
        with self._lock:
            n = self._samples[snippet_id]
            self._samples[snippet_id] += 1
            return n

    def pick(self, task_id: str | None, seed: int | None) -> tuple[Paper, Snippet]:
        """The task a reset names, or a draw from the selection (seeded: the same each time)."""
        if task_id is not None:
            found = self.tasks.get(task_id)
            if found is None:
                raise Refused(
                    ErrorCode.VALIDATION_ERROR,
                    f"no task {task_id!r} is served here ({len(self.task_ids)} tasks; see /rcb)",
                )
            return found
        draw = random.Random(seed) if seed is not None else random.SystemRandom()
        return self.tasks[draw.choice(self.task_ids)]

    def info(self) -> dict[str, Any]:
        """What ``/rcb`` says (nothing of any task's content)."""
        return {
            "name": "rcb-env",
            "protocol": "openenv-ws",
            "extensions": ["id", "NO_EPISODE", "DRAINING"],
            "tasks": len(self.task_ids),
            "task_ids": self.task_ids,
            "open_episodes": self.open_episodes,
            "max_episodes": self.limits.max_episodes,
            "connections": len(self.sessions),
            "held": len(self.held),
            "max_connections": self.limits.connections,
            "draining": self.draining,
            "idle_s": self.limits.idle_s,
            "episode_wall_s": self.limits.episode_wall_s,
            "grading_timeout_s": self.cfg.grading.timeout_s,
            "budgets": self.cfg.budgets.model_dump(mode="json"),
            "served": dict(self.served),
            "run_id": self.run_id,
        }

    def sync_ledger(self) -> None:
        """Force the started lines written so far to disk (in :attr:`journal`)."""
        try:
            self.ledger.sync()
        except OSError:
            log.exception("serve: the run's started lines could not be forced to disk")

    # housekeeping ---------------------------------------------------------------------------
    async def reap(self, now: float | None = None) -> int:
        """End the episodes idle past ``idle_s`` or open past ``episode_wall_s`` (each graded
        as it stands and recorded; its socket kept); how many."""
        now = time.monotonic() if now is None else now
        stale = [  # ended before this pass, and idle since: their clients have gone
            key
            for key, s in self.held.items()
            if not s.running and now - s.last_active > self.limits.idle_s
        ]
        every = [*self.sessions, *self.held.values()]
        due = [(s, r) for s in every if (r := s.overdue(now)) is not None]
        ended = await asyncio.gather(*(s.end_if_idle(r) for s, r in due))  # graded at once
        for key in stale:
            self.forget(key)
        return sum(ended)

    def room_to_hold(self) -> bool:
        """Whether another session without a socket fits (at most ``connections`` are held;
        ended ones are forgotten first, oldest first, to make room)."""
        cap = self.limits.connections
        if len(self.held) < cap:
            return True
        ended = sorted(
            (s.last_active, k)
            for k, s in self.held.items()
            if not s.running and not s.lock.locked()
        )
        for _, key in ended[: len(self.held) - cap + 1]:
            self.forget(key)
        return len(self.held) < cap

    def hold(self, key: str, session: ServedSession) -> None:
        """Keep ``session`` (no socket) under ``key`` until it is forgotten."""
        self.held[key] = session

    def forget(self, key: str) -> None:
        """Drop a held session (its episode has ended); its door is told."""
        session = self.held.pop(key, None)
        if session is not None and session.on_forget is not None:
            session.on_forget()

    async def drain(self) -> None:
        """Shutting down: no new connection or episode; running episodes get ``drain_s`` to
        end, then each is recorded as interrupted (unscored)."""
        self.draining = True
        deadline = time.monotonic() + self.limits.drain_s
        while self.open_episodes > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for session in [*self.sessions, *self.held.values()]:
            async with session.lock:  # a step in flight is answered first
                await session.interrupt("ServerShutdown", "the server shut down mid-episode")
        for key in list(self.held):
            self.forget(key)

    def close(self) -> None:
        """Wait for the work in flight; release the sandboxes' warm processes and templates."""
        self.executor.shutdown(wait=True)
        self.journal.shutdown(wait=True)
        self.ledger.close()
        shared.close_shared()


def _next_samples(run_dir: Path) -> Counter[str]:
    """Each snippet's next sample number in a run folder (a restarted server continues it)."""
    seen: Counter[str] = Counter()
    for record in read_records(run_dir / RECORDS):
        seen[record.snippet_id] = max(seen[record.snippet_id], record.sample + 1)
    events = run_dir / EVENTS
    if events.exists():
        for line in events.read_text(errors="replace").splitlines():
            try:
                key = json.loads(line).get("key", "")
            except (json.JSONDecodeError, AttributeError):
                continue
            snippet, _, n = str(key).rpartition("#")
            if snippet and n.isdigit():
                seen[snippet] = max(seen[snippet], int(n) + 1)
    return seen


class ServedSession:
    """One socket: a sequence of episodes, one at a time; each frame answered once, in
    order."""

    def __init__(self, server: EpisodeServer, client: dict[str, Any]) -> None:
        self.server = server
        self.client = client
        self.id = secrets.token_hex(4)
        self.seq = 0
        self.episode: Episode | None = None
        self.task_id = ""
        self.sample = 0
        self.recorded = False
        self.last_active = time.monotonic()
        self.lock = asyncio.Lock()
        self.on_forget: Callable[[], None] | None = None
        """Called when the server forgets a held session (its door releases what it holds)."""

    # frames ---------------------------------------------------------------------------------
    async def answer(self, raw: str | bytes) -> dict[str, Any] | None:
        """The answer to one frame (None: the client closed the session; a running episode
        was recorded as interrupted, and the socket is to be closed)."""
        async with self.lock:
            self.last_active = time.monotonic()
            self.seq += 1
            frame_id = f"{self.id}-{self.seq}"
            try:
                frame = _frame(raw)
                if isinstance(frame.get("id"), str | int):
                    frame_id = str(frame["id"])[:255]
                return await self._dispatch(frame, frame_id)
            except Refused as refused:
                return error_frame(refused.code, str(refused), frame_id)
            except Exception as exc:  # a programming error: said, and the session kept
                log.exception("serve: a frame failed", session=self.id)
                return error_frame(ErrorCode.EXECUTION_ERROR, f"{type(exc).__name__}", frame_id)
            finally:
                self.last_active = time.monotonic()

    async def _dispatch(self, frame: dict[str, Any], frame_id: str) -> dict[str, Any] | None:
        kind = frame.get("type")
        data = frame.get("data", {})
        if kind in ("reset", "step") and not isinstance(data, dict):
            raise Refused(ErrorCode.VALIDATION_ERROR, f"a {kind} frame's data must be an object")
        if kind == "reset":
            try:
                request = _Reset.model_validate(data)
            except ValidationError as exc:
                fields = sorted({".".join(map(str, e["loc"])) for e in exc.errors()})
                raise Refused(
                    ErrorCode.VALIDATION_ERROR,
                    "a reset takes task_id, seed (>= 0) and episode_id; refused: "
                    + ", ".join(fields),
                ) from None
            return await self._run(self._reset, request, frame_id)
        if kind == "step":
            if "data" not in frame:
                raise Refused(ErrorCode.VALIDATION_ERROR, "a step frame needs data (an action)")
            if self.episode is None:
                raise Refused(ErrorCode.NO_EPISODE, "no episode: send a reset first")
            return await self._run(self._act, dict(data), frame_id)
        if kind == "state":
            return state_frame(self.state(), frame_id)
        if kind == "close":
            await self.interrupt("ClientClosed", "the client closed the session mid-episode")
            return None  # OpenEnv's client sends close and reads nothing more
        raise Refused(
            ErrorCode.UNKNOWN_TYPE,
            f"unknown frame type {str(kind)[:40]!r}; known: reset, step, state, close",
        )

    async def _run(self, work: Callable[..., Any], arg: Any, frame_id: str) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        obs, reward, done = await loop.run_in_executor(self.server.executor, work, arg)
        return observation_frame(obs, reward, done, frame_id)

    # episode work (in the server's executor) ------------------------------------------------
    def _reset(self, request: _Reset) -> tuple[ServedObservation, float | None, bool]:
        paper, snippet = self.server.pick(request.task_id, request.seed)
        if self.server.draining:  # refused before the running episode is touched
            raise Refused(ErrorCode.DRAINING, "the server is shutting down; no new episode")
        self._end(StopReason.AGENT_STOPPED)  # an episode running is ended first (its slot freed)
        self.server._claim()
        try:
            self.sample = self.server._sample(snippet.id)
            self.task_id = snippet.id
            self.recorded = False
            self.episode = Episode(
                paper,
                snippet,
                config=self.server.cfg.episode,
                factory=self.server.factory,
                episode_id=request.episode_id
                or f"{snippet.slug[:40]}-s{self.sample}-{secrets.token_hex(4)}",
            )
            # the started line: written now (a server killed from here on leaves it), forced
            # to disk once the sandbox has started, while the answer goes out (an fsync beside
            # a sandbox's start slows the start by the fsync's time, 0.2-5 ms on a busy disk)
            self.server.ledger.start(episode_key(snippet.id, self.sample), sync=False)
            try:
                text, _info = self.episode.start()
            finally:
                self.server.journal.submit(self.server.sync_ledger)
        except BaseException:
            self.server._release()
            raise
        self._record_if_ended()
        return self._observed(text, tool_ok=True)

    def _act(self, data: dict[str, Any]) -> tuple[ServedObservation, float | None, bool]:
        episode = self.episode
        assert episode is not None
        if data.get("type") == "list_tools":
            obs = self._observed("The tools of this episode.", tool_ok=True)[0].model_copy(
                update={"tools": [t.model_dump() for t in tool_specs()]}
            )
            return obs, self._reward(), episode.done
        called = None
        if data.get("type") == "call_tool":
            arguments = data.get("arguments") or {}
            called = str(data.get("tool_name"))
            data = {
                "tool": data.get("tool_name"),
                **(arguments if isinstance(arguments, dict) else {}),
            }
        metadata = data.pop("metadata", None)
        if episode.done:
            return self._as_call(called, *self._observed(ENDED, tool_ok=False))
        if isinstance(metadata, dict) and isinstance(metadata.get("model_call"), dict):
            episode.model_calls.append({**metadata["model_call"], "step": len(episode.steps) + 1})
        text, _r, _t, _tr, info = episode.step(data)
        self._record_if_ended()
        return self._as_call(
            called, *self._observed(text, tool_ok=not info.get("action_error", False))
        )

    @staticmethod
    def _as_call(
        called: str | None, obs: ServedObservation, reward: float | None, done: bool
    ) -> tuple[ServedObservation, float | None, bool]:
        """A ``call_tool`` step's answer as OpenEnv's MCP client reads one: ``tool_name`` and
        ``result``, or ``error`` when the call was malformed (or came after the end)."""
        if called is None:
            return obs, reward, done
        answer: dict[str, Any] = {"tool_name": called}
        if obs.tool_ok:
            answer["result"] = obs.text
        else:
            answer["error"] = {"error_type": "invalid_args", "message": obs.text}
        return obs.model_copy(update=answer), reward, done

    def _observed(
        self, text: str, *, tool_ok: bool
    ) -> tuple[ServedObservation, float | None, bool]:
        episode = self.episode
        assert episode is not None
        outcome = episode.outcome
        obs = ServedObservation(
            text=text,
            episode_id=episode.episode_id,
            task_id=self.task_id,
            step=len(episode.steps),
            status="running" if outcome is None else outcome.status.value,
            reason=None if outcome is None else outcome.reason.value,
            scored=None if outcome is None else outcome.scored,
            passed=None if outcome is None else outcome.passed,
            weight=episode.snippet.weight,
            tool_ok=tool_ok,
            budgets={} if outcome is not None else episode.remaining(),
        )
        return obs, self._reward(), episode.done

    def _reward(self) -> float | None:
        return self.episode.reward() if self.episode is not None else None

    def _end(self, reason: StopReason) -> None:
        """End the running episode, graded as it stands (``reason``), and record it."""
        if self.episode is not None and not self.recorded:
            self.episode.stop(reason)
            self._record_if_ended()

    def _fail(self, kind: str, message: str) -> None:
        """End the running episode unscored (the connection or the server ended it)."""
        if self.episode is not None and not self.recorded:
            self.episode.fail(InfraError(stage="agent", type=kind, message=message))
            self._record_if_ended()

    def _record_if_ended(self) -> None:
        episode = self.episode
        if episode is None or self.recorded or episode.outcome is None:
            return
        self.recorded = True
        outcome: EpisodeOutcome = episode.outcome
        try:
            record = episode_record(
                episode,
                outcome,
                run_id=self.server.run_id,
                sample=self.sample,
                agent={"name": "openenv", **self.client},
                cfg=self.server.cfg,
            )
            self.server.ledger.finish(record)
            self.server.served[outcome.status.value] += 1
            log.info(
                "served episode",
                task_id=self.task_id,
                episode_id=episode.episode_id,
                status=outcome.status.value,
                reward=episode.reward(),
            )
        finally:
            episode.close()
            self.server._release()

    # housekeeping (on the event loop) -------------------------------------------------------
    def state(self) -> ServedState:
        episode = self.episode
        if episode is None:
            return ServedState()
        outcome = episode.outcome
        return ServedState(
            episode_id=episode.episode_id,
            step_count=len(episode.steps),
            task_id=self.task_id,
            status="running" if outcome is None else outcome.status.value,
            done=episode.done,
            reward=episode.reward(),
            scored=None if outcome is None else outcome.scored,
        )

    @property
    def running(self) -> bool:
        return self.episode is not None and not self.recorded

    def overdue(self, now: float) -> StopReason | None:
        """Why the reaper should end this session's episode now (None: it should not)."""
        episode = self.episode
        if not self.running or episode is None:
            return None
        if episode.duration_s > self.server.limits.episode_wall_s:
            return StopReason.BUDGET_WALL_S
        if now - self.last_active > self.server.limits.idle_s:
            return StopReason.AGENT_STOPPED
        return None

    async def end_if_idle(self, reason: StopReason) -> bool:
        """End the episode for the reaper, unless a frame is being answered."""
        if self.lock.locked():
            return False
        async with self.lock:
            if not self.running:
                return False
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self.server.executor, self._end, reason)
            self.last_active = time.monotonic()  # a held session's end stays readable a while
            return True

    async def interrupt(self, kind: str, message: str) -> None:
        """The socket is gone (or the server stops): a running episode is recorded unscored."""
        if not self.running:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.server.executor, self._fail, kind, message)

    async def disconnected(self) -> None:
        async with self.lock:
            await self.interrupt("ClientDisconnected", "the client disconnected mid-episode")
        self.server.sessions.discard(self)


def _frame(raw: str | bytes) -> dict[str, Any]:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    try:
        frame = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise Refused(
            ErrorCode.INVALID_JSON, f"the frame is not JSON ({exc.msg} at {exc.pos})"
        ) from None
    if not isinstance(frame, dict):
        raise Refused(
            ErrorCode.VALIDATION_ERROR,
            f"a frame is a JSON object with a 'type', not a {type(frame).__name__}",
        )
    return frame
