"""Cost from token usage and a configurable price table (USD per million tokens)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rcb_agents.models.types import Usage


class Price(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float
    output: float
    cached_input: float | None = None
    """Price of cached input tokens (default: the input price)."""


#: Illustrative list prices; a run's table is whatever --prices FILE gives (JSON model -> price).
#: An unknown model costs 0 and says so in the record.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4.1": Price(input=2.0, output=8.0, cached_input=0.5),
    "gpt-4.1-mini": Price(input=0.4, output=1.6, cached_input=0.1),
    "gpt-4o-mini": Price(input=0.15, output=0.6, cached_input=0.075),
    "claude-sonnet-4-5": Price(input=3.0, output=15.0, cached_input=0.3),
}


def load_prices(path: Path | None) -> dict[str, Price]:
    if path is None:
        return dict(DEFAULT_PRICES)
    data = json.loads(path.read_text())
    return {name: Price.model_validate(p) for name, p in data.items()}


def cost(usage: Usage, price: Price | None) -> float:
    if price is None:
        return 0.0
    cached = price.cached_input if price.cached_input is not None else price.input
    fresh = max(0, usage.input_tokens - usage.cached_tokens)
    return (
        fresh * price.input + usage.cached_tokens * cached + usage.output_tokens * price.output
    ) / 1e6
