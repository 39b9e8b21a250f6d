"""The one retry policy of rcb-env's infrastructure retries (tenacity): the eval's rounds of
infrastructure failures, a rollout's fresh-sandbox attempts and a group's refills, a grading run
killed from outside.

A :class:`RetryPolicy` says how many tries and how long to wait between them; a call says what
asks for another try: a result (``again`` gives the reason) or one of the policy's
``retry_on`` exceptions. Anything else propagates at once. Tests make every wait 0 s with
:func:`zero_waits` (no patching, no sleeping).

The model clients' retries (``rcb_agents.models.retry``: rate limits, overload, with
``Retry-After`` as :attr:`RetryPolicy.wait_hint`) run on it too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from tenacity import AsyncRetrying, RetryCallState, Retrying, stop_after_attempt

__all__ = ["Backoff", "RetryPolicy", "zero_waits"]

T = TypeVar("T")
Backoff = Literal["fixed", "linear", "exponential"]

_wait_scale = 1.0


@contextlib.contextmanager
def zero_waits() -> Iterator[None]:
    """Every policy's waits are 0 s inside the block (for tests: a retried path runs at once)."""
    global _wait_scale
    before, _wait_scale = _wait_scale, 0.0
    try:
        yield
    finally:
        _wait_scale = before


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often to try, and how long to wait between tries."""

    attempts: int = 1
    """Tries in all (1: no retry)."""
    delay_s: float = 0.0
    """The wait after the first failed try."""
    backoff: Backoff = "fixed"
    """How the wait grows after the n-th failed try: ``fixed`` (``delay_s``), ``linear``
    (``delay_s`` x n) or ``exponential`` (``delay_s`` x 2^(n-1))."""
    max_delay_s: float | None = None
    """The longest single wait (None: no cap)."""
    retry_on: tuple[type[BaseException], ...] = ()
    """Exceptions that are tried again (the last one is raised when the tries run out)."""
    wait_hint: Callable[[BaseException], float | None] | None = None
    """A failure's own word on how long to wait (an HTTP ``Retry-After``), used in place of
    the back-off when it gives one (still capped by :attr:`max_delay_s`)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"a retry policy makes at least 1 attempt, not {self.attempts}")
        if self.delay_s < 0:
            raise ValueError(f"a retry policy's delay is not negative, not {self.delay_s}")

    def wait_s(self, failed: int) -> float:
        """Seconds to wait after the ``failed``-th failed try (1-based)."""
        if self.backoff == "linear":
            wait = self.delay_s * failed
        elif self.backoff == "exponential":
            wait = self.delay_s * 2 ** (failed - 1)
        else:
            wait = self.delay_s
        if self.max_delay_s is not None:
            wait = min(wait, self.max_delay_s)
        return wait * _wait_scale

    def call(
        self,
        fn: Callable[[int], T],
        *,
        again: Callable[[T], str | None] | None = None,
        on_retry: Callable[[int, str], None] | None = None,
    ) -> T:
        """``fn(1)``, then ``fn(2)``... while the last try asks for another (``again(result)``
        gives a reason, or it raised one of :attr:`retry_on`) and tries are left, waiting
        :meth:`wait_s` between. ``on_retry(n, reason)`` runs before the wait after the n-th
        try. Returns the last result, also when it still asked for another try.

        Raises:
            BaseException: what ``fn`` raised (one of :attr:`retry_on` only on the last try).
        """
        tried = 0

        def once() -> T:
            nonlocal tried
            tried += 1
            return fn(tried)

        return Retrying(**self._settings(again, on_retry))(once)

    async def acall(
        self,
        fn: Callable[[int], Awaitable[T]],
        *,
        again: Callable[[T], str | None] | None = None,
        on_retry: Callable[[int, str], None] | None = None,
    ) -> T:
        """:meth:`call` for a coroutine function (the waits are ``asyncio.sleep``)."""
        tried = 0

        async def once() -> T:
            nonlocal tried
            tried += 1
            return await fn(tried)

        result: T = await AsyncRetrying(**self._settings(again, on_retry))(once)
        return result

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = None if exc is None or self.wait_hint is None else self.wait_hint(exc)
        if hinted is None:
            return self.wait_s(state.attempt_number)
        if self.max_delay_s is not None:
            hinted = min(hinted, self.max_delay_s)
        return hinted * _wait_scale

    def _settings(
        self,
        again: Callable[[Any], str | None] | None,
        on_retry: Callable[[int, str], None] | None,
    ) -> dict[str, Any]:
        def why(state: RetryCallState) -> str | None:
            assert state.outcome is not None
            exc = state.outcome.exception()
            if exc is not None:
                return f"{type(exc).__name__}: {exc}" if isinstance(exc, self.retry_on) else None
            return None if again is None else again(state.outcome.result())

        def before_sleep(state: RetryCallState) -> None:
            reason = why(state)
            if on_retry is not None and reason is not None:
                on_retry(state.attempt_number, reason)

        return {
            "stop": stop_after_attempt(self.attempts),
            "wait": self._wait,
            "retry": lambda state: why(state) is not None,
            "before_sleep": before_sleep,
            # Out of tries: the last result as it is, or the last exception raised again.
            "retry_error_callback": lambda state: state.outcome.result(),
        }
