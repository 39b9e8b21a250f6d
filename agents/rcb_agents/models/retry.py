"""The one retry policy for model calls (tenacity): rate limits, overload, 5xx and timeouts are
retried with exponential back-off, honouring ``Retry-After``; everything else is not."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from rcb_agents.models.errors import ProviderError, RetryableError

T = TypeVar("T")
RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


class RetryPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    attempts: int = 6
    """Tries in all (1 = no retry)."""
    initial_s: float = 1.0
    """First back-off; doubles each time."""
    max_wait_s: float = 60.0
    """Longest single wait, Retry-After included."""
    scale: float = 1.0
    """Multiplies every wait (tests set 0)."""


def _wait(policy: RetryPolicy) -> Callable[[RetryCallState], float]:
    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            base = exc.retry_after
        else:
            base = policy.initial_s * 2 ** (state.attempt_number - 1)
        return min(base, policy.max_wait_s) * policy.scale

    return wait


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy) -> tuple[T, int]:
    """Run ``fn``; return its value and how many retries it took.

    Raises:
        ProviderError: not retryable, or still failing after ``policy.attempts`` tries.
    """
    retrying = Retrying(
        stop=stop_after_attempt(policy.attempts),
        wait=_wait(policy),
        retry=retry_if_exception_type(RetryableError),
        reraise=True,
    )
    try:
        value = retrying(fn)
    except RetryableError as exc:
        raise ProviderError(
            f"gave up after {policy.attempts} attempts: {exc}", status=exc.status, retryable=True
        ) from exc
    return value, int(retrying.statistics.get("attempt_number", 1)) - 1


def classify_status(status: int, message: str, retry_after: str | None) -> ProviderError:
    """Map an HTTP status to our error types (one place for both providers)."""
    if status in RETRYABLE_STATUS:
        after: float | None = None
        if retry_after is not None:
            try:
                after = float(retry_after)
            except ValueError:
                after = None
        return RetryableError(f"HTTP {status}: {message}", status=status, retry_after=after)
    return ProviderError(f"HTTP {status}: {message}", status=status)


@contextlib.contextmanager
def sdk_errors(sdk: Any) -> Iterator[None]:
    """Translate an SDK's exceptions (the openai and anthropic SDKs name them alike) into ours."""
    try:
        yield
    except sdk.APIStatusError as exc:
        raise classify_status(
            exc.status_code, str(exc.message), exc.response.headers.get("retry-after")
        ) from exc
    except (sdk.APITimeoutError, sdk.APIConnectionError) as exc:
        raise RetryableError(f"{type(exc).__name__}: {exc}") from exc
