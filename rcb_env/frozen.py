"""The frozen model base of rcb-env's data (and of the agents' and integrations' own models)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Frozen"]


class Frozen(BaseModel):
    """Base of rcb-env's data models: immutable, unknown fields refused, field docstrings kept
    as descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
