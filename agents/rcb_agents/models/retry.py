"""The retry policy of model calls (its settings; the retries run on rcb-env's one retry
module, :mod:`rcb_env.retry`): rate limits, overload, 5xx and timeouts are
retried with exponential back-off, honouring ``Retry-After``; everything else is not."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from rcb_agents.models.errors import ProviderError, RetryableError
from rcb_env.retry import RetryPolicy as Retries

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


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy) -> tuple[T, int]:
    """Run ``fn`` under rcb-env's one retry policy (:class:`rcb_env.retry.RetryPolicy`:
    exponential back-off, a ``Retry-After`` in place of it); return its value and how many
    retries it took.

    Raises:
        ProviderError: not retryable, or still failing after ``policy.attempts`` tries.
    """
    tries = 0

    def once(n: int) -> T:
        nonlocal tries
        tries = n
        return fn()

    def hint(exc: BaseException) -> float | None:
        after = exc.retry_after if isinstance(exc, RetryableError) else None
        return None if after is None else after * policy.scale

    retrying = Retries(
        attempts=policy.attempts,
        delay_s=policy.initial_s * policy.scale,
        backoff="exponential",
        max_delay_s=policy.max_wait_s * policy.scale,
        retry_on=(RetryableError,),
        wait_hint=hint,
    )
    try:
        value = retrying.call(once)
    except RetryableError as exc:
        raise ProviderError(
            f"gave up after {policy.attempts} attempts: {exc}", status=exc.status, retryable=True
        ) from exc
    return value, tries - 1


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
