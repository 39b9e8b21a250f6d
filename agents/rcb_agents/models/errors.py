"""Model API failures, split by whether trying again can help."""

from __future__ import annotations

from rcb_env.errors import ModelError


class ProviderError(ModelError):
    """A model call failed for good (after retries, or not retryable): an infrastructure error
    of the episode, never a reward of 0."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class RetryableError(ProviderError):
    """Rate limit, overload, 5xx, timeout, connection failure: worth another attempt."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status, retryable=True)
        self.retry_after = retry_after
