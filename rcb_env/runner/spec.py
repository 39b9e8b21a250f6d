"""A run, as one model: what ``rcb-env eval`` takes, from its flags or from a run file
(``--config run.yaml``), or both (a flag given on the command line overrides the file).

The fields are the command's options by their long names (``--max-wall`` is ``max_wall``). A
run file is YAML with any of them::

    agent: tools
    model: openai:gpt-4.1
    pset: [researchcodebench]
    jobs: 2
    samples: 3
    max_steps: 40
    test_feedback: none
    sandbox:
      backend: docker
      options: {docker_base: "python:3.11-slim", pool_size: 2}

``sandbox`` is a backend's name, or the backend with its options (each checked by the backend's
own options model); ``base``, ``pool`` and ``cgroup_limits`` are shorthands for three of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from rcb_env.agent import model_settings
from rcb_env.episode.driver import BudgetConfig
from rcb_env.episode.env import EnvConfig
from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.grading.grader import GradingConfig
from rcb_env.runner.episode import EvalConfig
from rcb_env.sandbox import SandboxConfig, backend_class, backend_names, sandbox_config
from rcb_env.sandbox import registry as backends

#: The shorthand flags of backend options: flag's name (and run-file key) -> (option, flag).
SHORTHANDS = {
    "base": ("docker_base", "--base"),
    "pool": ("pool_size", "--pool"),
    "cgroup_limits": ("cgroup_limits", "--cgroup-limits"),
}


def parse_sandbox_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``--sandbox-option KEY=VALUE`` pairs as options: a value that starts with ``[`` or ``{``
    is JSON (a list, a mapping), any other is the text (the backend's model converts ``2`` or
    ``true`` to its field's type); a key given twice keeps the last value.

    Raises:
        ConfigError: a pair without ``=`` or a key, or a value that is not the JSON it looks like.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--sandbox-option {pair!r}: expected KEY=VALUE")
        parsed: Any = value
        if value.lstrip().startswith(("[", "{")):
            try:
                parsed = json.loads(value)
            except ValueError as exc:
                raise ConfigError(f"--sandbox-option {key.strip()}: not JSON ({exc})") from None
        options[key.strip()] = parsed
    return options


def sandbox_settings(
    backend: str = "auto",
    options: Mapping[str, Any] | Iterable[str] = (),
    *,
    grading: str = "warm",
    shorthands: Mapping[str, Any] | None = None,
) -> SandboxConfig:
    """The sandbox of a command line or run file: the backend, its ``options`` (a mapping, or
    ``KEY=VALUE`` pairs) and the ``shorthands`` given (:data:`SHORTHANDS`: ``base``, ``pool``,
    ``cgroup_limits``; None or 0 is not given) for three of the options. The one mapping of the
    sandbox flags: every command and :meth:`RunSpec.sandbox_config` use it. ``auto``'s options
    are checked now against the backend it may pick (and kept as given, checked again once
    resolved).

    Raises:
        ConfigError: an option the backend does not have or a wrong value (naming the backend
            and the option), a malformed pair, or a shorthand and an option that disagree.
    """
    given = dict(options) if isinstance(options, Mapping) else parse_sandbox_options(options)
    for name, value in (shorthands or {}).items():
        key, flag = SHORTHANDS[name]
        if value is None or value == 0:
            continue
        if key in given and given[key] != value:
            raise ConfigError(f"{flag} {value} and --sandbox-option {key}={given[key]} disagree")
        given[key] = value
    if given and backend not in backend_names():  # ``auto``: not a backend until resolved
        _check_for_auto(given)
    return sandbox_config(backend, warm_grading=grading == "warm", **given)


def _check_for_auto(options: Mapping[str, Any]) -> None:
    """``auto``'s options, checked against the backends it may pick (one of them must take
    them all).

    Raises:
        ConfigError: none does (the first one's refusal, naming it).
    """
    refusals: list[ConfigError] = []
    for name in backend_names():
        model = backends.options_model(name)
        if model is None or not backend_class(name).auto:
            continue
        try:
            backends.check_options(name, model, options)
        except ConfigError as exc:
            refusals.append(ConfigError(f"--sandbox auto would pick {name}: {exc}"))
        else:
            return
    if refusals:
        raise refusals[0]


def _problem(error: Any, values: dict[str, Any]) -> str:
    """One validation problem in the words of the command line and the run file: a required
    option given nowhere is named as the flag and the file's key."""
    where = ".".join(str(p) for p in error["loc"]) or "run"
    top = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "missing" or (
        len(error["loc"]) == 1 and top in values and values[top] is None
    ):
        return f"--{top.replace('_', '-')} is required (or `{top}:` in a --config run file)"
    return f"{where}: {error['msg']}"


def _sandbox_section(
    path: Path, section: dict[str, Any], overrides: dict[str, Any]
) -> dict[str, Any]:
    """A run file's ``sandbox: {backend: ..., options: {...}}`` as the spec's ``sandbox`` and
    ``sandbox_options``, under what the command line gives (``--sandbox``; each
    ``--sandbox-option`` over the file's option of that name).

    Raises:
        ConfigError: a key other than ``backend`` and ``options``, or options that are not a
            mapping.
    """
    unknown = sorted(set(section) - {"backend", "options"})
    options = section.get("options") or {}
    if unknown or not isinstance(options, dict):
        raise ConfigError(
            f"{path}: sandbox is a backend's name or {{backend: NAME, options: {{KEY: VALUE}}}}"
            + (f" (not {', '.join(unknown)})" if unknown else "")
        )
    flags = overrides.get("sandbox_options") or ()
    extra = dict(flags) if isinstance(flags, dict) else parse_sandbox_options(flags)
    return {
        "sandbox": overrides.get("sandbox", section.get("backend", "auto")),
        "sandbox_options": {**options, **extra},
    }


class RunSpec(Frozen):
    """Everything ``rcb-env eval`` runs (see the module)."""

    agent: str
    """oracle, null, single-shot, tools, or package.module:Class."""
    pset: tuple[str, ...] = ()
    """Benchmarks by name or folder (none: the bundled tasks)."""
    papers: tuple[str, ...] = ()
    snippets: tuple[str, ...] = ()
    subset: str | None = None
    """Only the snippets of this named subset (``verified``) or subset file."""
    jobs: int = Field(default=1, ge=1)
    samples: int = Field(default=1, ge=1)
    sandbox: str = "auto"
    sandbox_options: dict[str, Any] | tuple[str, ...] = ()
    """The backend's options: ``KEY=VALUE`` pairs (the flag) or a mapping (a run file's
    ``sandbox: {backend: ..., options: {...}}``)."""
    base: str | None = None
    pool: int = 0
    cgroup_limits: str | None = None
    grading: Literal["warm", "cold"] = "warm"
    runs_dir: Path = Path("runs")
    resume: Path | None = None
    infra_retries: int = 1
    retry_delay: float = 5.0
    max_steps: int = 50
    max_wall: float = 1800.0
    test_feedback: Literal["full", "summary", "none"] = "summary"
    paper_in_prompt: Literal["full", "outline"] = "full"
    timeout: float | None = None
    model: str | None = None
    base_url: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    prices: Path | None = None
    cache: Path | None = None
    concurrency: int = 4
    no_paper: bool = False
    logprobs: bool = False
    ray_address: str | None = None
    ray_warm: bool = False

    @field_validator("pset", "papers", "snippets", mode="before")
    @classmethod
    def _many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @classmethod
    def load(cls, path: Path, overrides: dict[str, Any] | None = None) -> RunSpec:
        """A run file, with ``overrides`` (the flags given on the command line) on top.

        Raises:
            ConfigError: the file is not YAML of this model (its problems named).
        """
        from ruamel.yaml import YAML
        from ruamel.yaml.error import YAMLError

        try:
            data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8")) or {}
        except (OSError, YAMLError) as exc:
            # The parser knows the text, not the file: say which file its lines are of.
            said = str(exc).replace('"<unicode string>"', str(path))
            raise ConfigError(f"{path}: cannot read the run file: {said}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a run file is a mapping of option names to values")
        data = {str(k).replace("-", "_"): v for k, v in data.items()}
        if "ray" in data:  # the flag's own name
            data["ray_address"] = data.pop("ray")
        merged = {**data, **(overrides or {})}
        sandbox = data.get("sandbox")
        if isinstance(sandbox, dict):  # sandbox: {backend: ..., options: {...}}
            merged.update(_sandbox_section(path, sandbox, overrides or {}))
        return cls.build(merged, source=str(path))

    @classmethod
    def build(cls, values: dict[str, Any], source: str = "the options") -> RunSpec:
        """The spec from option values.

        Raises:
            ConfigError: a value is missing or wrong (each problem named).
        """
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(_problem(e, values) for e in exc.errors())
            raise ConfigError(f"{source}: {problems}") from exc

    def sandbox_config(self) -> SandboxConfig:
        """The sandbox of the run (:func:`sandbox_settings`): ``sandbox_options``, and ``base``,
        ``pool`` and ``cgroup_limits`` when given, are the backend's options.

        Raises:
            ConfigError: one the chosen backend does not have, or a wrong value.
        """
        return sandbox_settings(
            self.sandbox,
            self.sandbox_options,
            grading=self.grading,
            shorthands={"base": self.base, "pool": self.pool, "cgroup_limits": self.cgroup_limits},
        )

    def eval_config(self) -> EvalConfig:
        """The run's :class:`EvalConfig` (what a resumed run must match)."""
        model = None
        if self.model is not None:
            model = model_settings(
                {
                    "spec": self.model,
                    "base_url": self.base_url,
                    "temperature": self.temperature,
                    "concurrency": self.concurrency,
                    "cache_dir": self.cache,
                    "prices": self.prices,
                    "logprobs": self.logprobs,
                }
            )
        return EvalConfig(
            agent=self.agent,
            model=model,
            with_paper=not self.no_paper,
            samples=self.samples,
            env=EnvConfig(test_feedback=self.test_feedback, paper_in_prompt=self.paper_in_prompt),
            sandbox=self.sandbox_config(),
            grading=GradingConfig()
            if self.timeout is None
            else GradingConfig(timeout_s=self.timeout),
            budgets=BudgetConfig(
                max_steps=self.max_steps,
                max_wall_s=self.max_wall,
                max_tokens=self.max_tokens,
                max_cost=self.max_cost,
            ),
        )
