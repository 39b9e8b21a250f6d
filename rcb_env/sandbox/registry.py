"""The sandbox backends by name, and each one's own settings.

The built-in backends are named as ``module:Class`` and imported on first use
(:class:`rcb_env.registry.Registry`); :func:`rcb_env.sandbox.backend.register_backend` adds
others. A backend's settings are its ``options_model``: :func:`check_options` validates
``SandboxConfig.options`` against it (when the config is made, for a backend named there; once
``auto`` is resolved, for the one it picked), and :func:`owners` names the backends that have a
setting (what a misplaced top-level one belongs to).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from rcb_env.errors import ConfigError
from rcb_env.registry import Registry
from rcb_env.sandbox import scratch as scratch_dirs

#: The entry-point group where other distributions declare backends
#: (``[project.entry-points."rcb_env.backends"] name = "package.module:Backend"``).
BACKENDS_GROUP = "rcb_env.backends"
#: Every backend by name (classes of :class:`rcb_env.sandbox.backend.Backend`): built in,
#: declared by an installed distribution, or registered (:func:`register_backend`).
backends: Registry[Any] = Registry(
    "sandbox backend",
    {
        "bwrap": "rcb_env.sandbox.backends.bwrap:BwrapBackend",
        "docker": "rcb_env.sandbox.backends.docker.backend:DockerBackend",
        "local": "rcb_env.sandbox.backends.local:LocalBackend",
    },
    group=BACKENDS_GROUP,
    on_load=lambda name: scratch_dirs.register_prefix(f"rcb-{name}-"),
)

for _name in backends.builtin:
    scratch_dirs.register_prefix(f"rcb-{_name}-")


def options_model(name: str) -> type[BaseModel] | None:
    """The settings model of backend ``name``; None for ``auto`` or a name nothing has (the
    backend is checked once resolved)."""
    if name == "auto" or name not in backends.names():
        return None
    model: type[BaseModel] = backends.get(name).options_model
    return model


def check_options(name: str, model: type[BaseModel], options: Mapping[str, Any]) -> BaseModel:
    """``options`` as the settings of backend ``name``, whose model is ``model``.

    Raises:
        ConfigError: a setting the backend does not have, or a wrong value (naming the backend).
    """
    unknown = sorted(set(options) - set(model.model_fields))
    if unknown:
        known = ", ".join(model.model_fields) or "none"
        elsewhere = [
            f"{key} is a {' and '.join(owners(key))} option" for key in unknown if owners(key)
        ]
        raise ConfigError(
            f"the {name} backend has no option {', '.join(map(repr, unknown))} (its options: "
            f"{known})" + (f"; {'; '.join(elsewhere)}" if elsewhere else "")
        )
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise ConfigError(f"the {name} backend's options: {problems}") from exc


def owners(setting: str) -> list[str]:
    """The backends that have ``setting`` among their options."""
    return [
        name
        for name in backends.names()
        if setting in backends.get(name).options_model.model_fields
    ]


def comparable(sandbox: Mapping[str, Any]) -> dict[str, Any]:
    """A sandbox config as JSON (a run's manifest; one an older version wrote, with every
    backend's settings at the top level, too) with its backend's options complete, defaults
    filled in: two configs that sandbox alike compare equal. ``auto`` counts as the first
    backend it may pick."""
    data = dict(sandbox)
    name = str(data.get("backend", "auto"))
    if name == "auto":
        picks = [n for n in backends.names() if backends.get(n).auto]
        name = picks[0] if picks else name
    model = options_model(name)
    options = dict(data.get("options") or {})
    for key in [k for k in data if owners(k)]:
        value = data.pop(key)
        if model is not None and key in model.model_fields:
            options.setdefault(key, value)
    if model is not None:
        with contextlib.suppress(ValidationError):
            options = model.model_validate(options).model_dump(mode="json")
    return {**data, "options": options}
