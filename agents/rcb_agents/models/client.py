"""A chat model behind one interface: ``complete(system, transcript, tools)``.

Concerns live in their own modules: retries (:mod:`.retry`), prices (:mod:`.pricing`), wire
formats (:mod:`.openai_chat`, :mod:`.anthropic_messages`). This class adds the on-disk response
cache, the per-provider concurrency cap shared by all workers, and a record of every call.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import diskcache
from pydantic import BaseModel, ConfigDict

from rcb_agents.models.errors import ProviderError
from rcb_agents.models.pricing import Price, cost, load_prices
from rcb_agents.models.retry import RetryPolicy, call_with_retries
from rcb_agents.models.types import Completion, ModelCall, Turn, Usage
from rcb_env.agent import MODEL_CAP_ACTOR as CLUSTER_CAP
from rcb_env.registry import import_target
from rcb_env.tools.actions import ToolSpec

_caps: dict[tuple[str, str], threading.BoundedSemaphore] = {}
_caps_lock = threading.Lock()


class _ClusterCap:
    """A per-endpoint cap held by one Ray actor for every worker of the cluster."""

    def __init__(self, actor: Any, key: str, size: int) -> None:
        self.actor, self.key, self.size = actor, key, size

    def __enter__(self) -> None:
        import ray

        ray.get(self.actor.acquire.remote(self.key, self.size))

    def __exit__(self, *exc: object) -> None:
        import ray

        ray.get(self.actor.release.remote(self.key))


def _cap(key: tuple[str, str], size: int) -> Any:
    """One semaphore per (provider, endpoint): for the whole process (all workers share it), or,
    in a run on a Ray cluster, for the whole cluster (its actor; see :data:`CLUSTER_CAP`)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        try:
            actor = ray.get_actor(CLUSTER_CAP)
        except ValueError:
            actor = None
        if actor is not None:
            return _ClusterCap(actor, "\n".join(key), size)
    with _caps_lock:
        if key not in _caps:
            _caps[key] = threading.BoundedSemaphore(size)
        return _caps[key]


class ModelConfig(BaseModel):
    """What selects and drives a model; part of a run's identity."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str
    """``openai:<model>`` or ``anthropic:<model>``."""
    base_url: str | None = None
    """OpenAI-compatible servers (vLLM, OpenRouter, ...) or a local test server."""
    temperature: float | None = None
    """Sampling temperature; None leaves the provider's default."""
    max_output_tokens: int = 4096
    concurrency: int = 4
    """Requests in flight to this provider at once, across all workers."""
    timeout_s: float = 600.0
    retry: RetryPolicy = RetryPolicy()
    cache_dir: Path | None = None
    """Answer identical requests from disk (a re-run costs nothing)."""
    prices: Path | None = None
    """JSON price table (model -> {input, output, cached_input} per million tokens)."""
    logprobs: bool = False
    """Ask for token log-probabilities (servers that support it return them)."""

    @property
    def provider(self) -> str:
        return self.spec.partition(":")[0]

    @property
    def name(self) -> str:
        return self.spec.partition(":")[2]


class ChatModel(ABC):
    provider = "abstract"

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.model = config.name
        self.prices: dict[str, Price] = load_prices(config.prices)
        self.calls: list[ModelCall] = []
        self._cap = _cap((self.provider, config.base_url or "default"), config.concurrency)

    @abstractmethod
    def payload(
        self, system: str, transcript: Sequence[Turn], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The request body in the provider's wire format."""

    @abstractmethod
    def send(self, payload: dict[str, Any]) -> Completion:
        """One HTTP request through the provider's SDK.

        Raises:
            RetryableError: rate limit, overload, 5xx, timeout, connection failure.
            ProviderError: anything else (auth, bad request, context length).
        """

    def complete(
        self, system: str, transcript: Sequence[Turn], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        """Cached, capped, retried; recorded in :attr:`calls` (failures too).

        Raises:
            ProviderError: the call failed for good.
        """
        payload = self.payload(system, transcript, tools)
        body = json.dumps(payload, sort_keys=True, default=str)
        started = time.time()
        t0 = time.monotonic()
        cached = self._cache_get(body)
        retries = 0
        try:
            if cached is not None:
                completion = cached
            else:
                with self._cap:
                    completion, retries = call_with_retries(
                        lambda: self.send(payload), self.config.retry
                    )
                self._cache_put(body, completion)
        except ProviderError as exc:
            self.calls.append(
                ModelCall(
                    provider=self.provider,
                    model=self.model,
                    request_chars=len(body),
                    latency_s=round(time.monotonic() - t0, 4),
                    error=str(exc),
                    started_at=started,
                )
            )
            raise
        usage = Usage() if cached is not None else completion.usage
        self.calls.append(
            ModelCall(
                provider=self.provider,
                model=self.model,
                request_chars=len(body),
                completion=completion,
                usage=usage,
                cost=cost(usage, self.prices.get(self.model)),
                latency_s=round(time.monotonic() - t0, 4),
                retries=retries,
                cached=cached is not None,
                started_at=started,
            )
        )
        return completion

    def drain_calls(self) -> list[ModelCall]:
        calls, self.calls = self.calls, []
        return calls

    # cache -----------------------------------------------------------------------------------
    def _cache(self) -> diskcache.Cache | None:
        """The response cache (diskcache: safe across threads and processes), opened once."""
        if self.config.cache_dir is None:
            return None
        with _caches_lock:
            cache = _caches.get(self.config.cache_dir)
            if cache is None:
                cache = _caches[self.config.cache_dir] = diskcache.Cache(str(self.config.cache_dir))
            return cache

    def _cache_key(self, body: str) -> str:
        # Provider and full request body (model, messages, tools, sampling); not the endpoint's
        # address, which may change between runs (a local server's port).
        return hashlib.sha256(f"{self.provider}\n{body}".encode()).hexdigest()

    def _cache_get(self, body: str) -> Completion | None:
        cache = self._cache()
        if cache is None:
            return None
        raw = cache.get(self._cache_key(body))
        if not isinstance(raw, str):
            return None
        try:
            return Completion.model_validate_json(raw)
        except ValueError:
            return None

    def _cache_put(self, body: str, completion: Completion) -> None:
        cache = self._cache()
        if cache is not None:
            cache.set(self._cache_key(body), completion.model_dump_json())


_caches: dict[Path, diskcache.Cache] = {}
_caches_lock = threading.Lock()


def make_model(config: ModelConfig) -> ChatModel:
    """``openai:...`` or ``anthropic:...`` -> a client.

    Raises:
        ValueError: unknown provider.
    """
    target = PROVIDERS.get(config.provider)
    if target is None:
        raise ValueError(
            f"unknown model provider in {config.spec!r}: use "
            + " or ".join(f"{name}:<model>" for name in PROVIDERS)
        )
    try:
        cls: Callable[[ModelConfig], ChatModel] = import_target(target)
    except ImportError as exc:
        raise ValueError(
            f"provider {config.provider} needs its SDK ({exc.name}): pip install 'rcb-env[agents]'"
        ) from None
    return cls(config)


#: Provider name -> ``module:Class``, imported on first use (an SDK that is not installed only
#: matters to the runs that ask for it).
PROVIDERS: dict[str, str] = {
    "openai": "rcb_agents.models.openai_chat:OpenAIChat",
    "anthropic": "rcb_agents.models.anthropic_messages:AnthropicMessages",
}
