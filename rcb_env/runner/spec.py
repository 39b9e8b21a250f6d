"""A run, as one model: what ``rcb-env eval`` takes, from its flags or from a run file
(``--config run.yaml``), or both (a flag given on the command line overrides the file).

The model is nested as the configurations are: ``eval`` is the run's :class:`EvalConfig` (what
a resumed run must match), ``selection`` which snippets run, ``dispatch`` where and how often,
``ceiling`` the whole run's spending ceiling;
``runs_dir`` and ``resume`` the run's folder. A run file mirrors it::

    eval:
      agent: tools
      model: {spec: openai:gpt-4.1}
      samples: 3
      budgets: {max_steps: 40}
      env: {test_feedback: none}
      sandbox:
        backend: docker
        options: {docker_base: "python:3.11-slim", pool_size: 2}
    selection: {pset: [researchcodebench]}
    dispatch: {jobs: 2}

``eval.sandbox`` is a backend's name, or the backend with its options (each checked by the
backend's own options model) and any other field of the sandbox's config. The flat names of
the flags (:data:`FLAT`: ``max_wall``, ``pset``, ``sandbox``, ...) are read too, so the run
files of earlier versions load as they are; ``base``, ``pool`` and ``cgroup_limits`` are
shorthands for three backend options.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from rcb_env.agent import model_settings
from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.runner.episode import EvalConfig
from rcb_env.runner.eval import RunCeiling
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


class SandboxRefusedError(ConfigError):
    """The run's sandbox settings are refused (an option the backend does not have, a wrong
    value): the command line's usage error."""


#: The flat names (the flags', and older run files' keys) -> where each lives in the nested
#: spec. ``no_paper`` is the negation of ``eval.with_paper``; the sandbox's shorthands
#: (:data:`SHORTHANDS`) and ``grading`` (warm or cold) are read by :func:`sandbox_settings`.
FLAT: dict[str, str] = {
    "agent": "eval.agent",
    "samples": "eval.samples",
    "no_paper": "eval.with_paper",
    "test_feedback": "eval.env.test_feedback",
    "paper_in_prompt": "eval.env.paper_in_prompt",
    "timeout": "eval.grading.timeout_s",
    "max_steps": "eval.budgets.max_steps",
    "max_wall": "eval.budgets.max_wall_s",
    "max_tokens": "eval.budgets.max_tokens",
    "max_cost": "eval.budgets.max_cost",
    "model": "eval.model.spec",
    "base_url": "eval.model.base_url",
    "temperature": "eval.model.temperature",
    "concurrency": "eval.model.concurrency",
    "cache": "eval.model.cache_dir",
    "prices": "eval.model.prices",
    "logprobs": "eval.model.logprobs",
    "sandbox": "eval.sandbox.backend",
    "sandbox_options": "eval.sandbox.options",
    "grading": "eval.sandbox.grading",
    "base": "eval.sandbox.base",
    "pool": "eval.sandbox.pool",
    "cgroup_limits": "eval.sandbox.cgroup_limits",
    "pset": "selection.pset",
    "papers": "selection.papers",
    "snippets": "selection.snippets",
    "subset": "selection.subset",
    "with_test_set": "selection.with_test_set",
    "jobs": "dispatch.jobs",
    "ray": "dispatch.ray",
    "ray_address": "dispatch.ray",
    "ray_warm": "dispatch.warm",
    "infra_retries": "dispatch.infra_retries",
    "retry_delay": "dispatch.retry_delay_s",
    "max_run_cost": "ceiling.max_cost",
    "max_run_tokens": "ceiling.max_tokens",
    "runs_dir": "runs_dir",
    "resume": "resume",
}
#: The flat names that set their field to the negation of their value.
NEGATED = frozenset({"no_paper"})


class ModelChoice(Frozen):
    """The model of the LLM agents as a run names it (``eval.model``); the agents' own model
    settings check and complete it (:func:`rcb_env.agent.model_settings`), and any other of
    their settings may be given beside these."""

    model_config = ConfigDict(extra="allow")

    spec: str | None = None
    """For single-shot/tools: openai:<model> or anthropic:<model>."""
    base_url: str | None = None
    """OpenAI-compatible or Anthropic endpoint (vLLM, a local server)."""
    temperature: float | None = None
    """Sampling temperature (default: the provider's)."""
    concurrency: int | None = None
    """Model requests in flight (default: the agents' model settings')."""
    cache_dir: Path | None = None
    """Response cache."""
    prices: Path | None = None
    """JSON price table."""
    logprobs: bool = False
    """Ask the server for token log-probabilities."""


class Selection(Frozen):
    """Which snippets a run runs."""

    pset: tuple[str, ...] = ()
    """Benchmarks by name or folder (none: the bundled tasks)."""
    papers: tuple[str, ...] = ()
    """Only these papers."""
    snippets: tuple[str, ...] = ()
    """Only these snippets: <paper>/<name> or <name>."""
    subset: str | None = None
    """Only the snippets of this named subset (``verified``) or subset file."""
    with_test_set: bool = False
    """Run a synthesised training set (``rcb-env synth``) together with its own test set
    (refused otherwise)."""

    @field_validator("pset", "papers", "snippets", mode="before")
    @classmethod
    def _many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value


class DispatchConfig(Frozen):
    """Where a run's episodes run (:func:`rcb_env.runner.dispatchers.dispatcher_for`) and how
    often those that fail for infrastructure reasons run again."""

    jobs: int = Field(default=1, ge=1)
    """Episodes in parallel."""
    ray: str | None = None
    """Run the episodes on Ray: 'local' (a Ray instance here with --jobs sandbox slots) or a
    cluster's address (its nodes declare the rcb_sandbox resource). Needs rcb-env[ray]."""
    warm: bool = False
    """With --ray: one long-lived worker per node (its sandbox templates and caches kept), the
    groups of a paper routed to the same worker."""
    infra_retries: int = Field(default=1, ge=0)
    """Rounds in which episodes that failed for infrastructure reasons run again."""
    retry_delay_s: float = Field(default=5.0, ge=0)
    """Seconds x round before a retry round."""


class RunSpec(Frozen):
    """Everything ``rcb-env eval`` runs (see the module)."""

    eval: EvalConfig
    """The run's configuration (what a resumed run must match)."""
    selection: Selection = Selection()
    dispatch: DispatchConfig = DispatchConfig()
    ceiling: RunCeiling = RunCeiling()
    """The whole run's spending ceiling (not the run's configuration: a resumed run takes a
    new one)."""
    runs_dir: Path = Path("runs")
    """Where new runs' folders are made."""
    resume: Path | None = None
    """Continue this run: only missing and infrastructure-failed episodes run."""

    @classmethod
    def load(cls, path: Path, overrides: dict[str, Any] | None = None) -> RunSpec:
        """A run file (nested, or flat as earlier versions wrote it), with ``overrides`` (the
        flags given on the command line, by their flat names) on top.

        Raises:
            ConfigError: the file is not YAML of this model (its problems named);
                :class:`SandboxRefusedError`: its sandbox settings are refused.
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
        nested = _nested(data, source=str(path))
        flags = _nested(_given(overrides or {}), source="the options")
        return cls._from(_merge(nested, flags), source=str(path))

    @classmethod
    def build(cls, values: dict[str, Any], source: str = "the options") -> RunSpec:
        """The spec from option values (the flags by their flat names, None: not given; or the
        nested form).

        Raises:
            ConfigError: a value is missing or wrong (each problem named);
                :class:`SandboxRefusedError`: the sandbox settings are refused.
        """
        return cls._from(_nested(_given(values), source=source), source=source)

    @classmethod
    def _from(cls, nested: dict[str, Any], source: str) -> RunSpec:
        values = dict(nested)
        eval_part = dict(values.get("eval") or {})
        eval_part["sandbox"] = _sandbox(eval_part.get("sandbox"), source)
        model = eval_part.get("model")
        if isinstance(model, str):
            model = {"spec": model}
        if isinstance(model, dict):
            eval_part["model"] = _model(model, source)
        values["eval"] = eval_part
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(_problem(e) for e in exc.errors())
            raise ConfigError(f"{source}: {problems}") from exc

    def sandbox_config(self) -> SandboxConfig:
        """The sandbox of the run (built by :func:`sandbox_settings` when the spec was)."""
        return self.eval.sandbox

    def eval_config(self) -> EvalConfig:
        """The run's :class:`EvalConfig` (what a resumed run must match)."""
        return self.eval


def _given(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags given: None is a flag not given (its field's default then holds)."""
    return {name: value for name, value in flags.items() if value is not None}


def _nested(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``data`` in the nested form: each flat name (:data:`FLAT`; a dash may stand for the
    underscore) put where it lives, over the nested parts given beside it."""
    nested: dict[str, Any] = {}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in FLAT:
            if value is not None:  # a flat name's null was "not given" (its default)
                flat[name] = value
        else:
            nested[name] = value
    sandbox = flat.pop("sandbox", None)
    if isinstance(sandbox, Mapping):  # sandbox: {backend: ..., options: {...}}
        unknown = sorted(set(sandbox) - {"backend", "options"})
        options = sandbox.get("options") or {}
        if unknown or not isinstance(options, Mapping):
            raise ConfigError(
                f"{source}: sandbox is a backend's name or "
                "{backend: NAME, options: {KEY: VALUE}}"
                + (f" (not {', '.join(unknown)})" if unknown else "")
            )
        sandbox = sandbox.get("backend")
        flat["sandbox_options"] = _merge(dict(options), _options(flat.get("sandbox_options")))
    if sandbox is not None:
        flat["sandbox"] = sandbox
    if "sandbox_options" in flat:
        flat["sandbox_options"] = _options(flat["sandbox_options"])
    part = nested.get("eval")
    if isinstance(part, dict) and isinstance(part.get("sandbox"), str):
        nested["eval"] = {**part, "sandbox": {"backend": part["sandbox"]}}
    for name, value in flat.items():
        where = FLAT[name].split(".")
        part = nested
        for step in where[:-1]:
            part = part.setdefault(step, {})
            if not isinstance(part, dict):
                raise ConfigError(f"{source}: {'.'.join(where[:-1])} is a mapping")
        part[where[-1]] = (not value) if name in NEGATED else value
    return nested


def _options(value: Any) -> Any:
    """``--sandbox-option`` pairs as a mapping (a mapping, or what is no list of pairs, kept)."""
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        try:
            return parse_sandbox_options(value)
        except ConfigError as exc:
            raise SandboxRefusedError(str(exc)) from None
    return {} if value is None else value


def _merge(base: dict[str, Any], top: Any) -> dict[str, Any]:
    """``top`` over ``base``, mapping by mapping (a sandbox option given as a flag replaces the
    file's option of that name, not all of them)."""
    merged = dict(base)
    for key, value in (top or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _sandbox(section: Any, source: str) -> Any:
    """``eval.sandbox`` as a :class:`SandboxConfig`: a backend's name, or the backend, its
    options, the shorthands and warm or cold (:func:`sandbox_settings`, the one mapping), with
    any other field of the config beside them.

    Raises:
        SandboxRefusedError: what the backend or the config refuses.
    """
    if isinstance(section, SandboxConfig):
        return section
    if section is None or isinstance(section, str):
        section = {"backend": section or "auto"}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: eval.sandbox is a backend's name or a mapping")
    rest = dict(section)
    backend = rest.pop("backend", SandboxConfig.model_fields["backend"].default)
    options = _options(rest.pop("options", None))
    shorthands = {name: rest.pop(name) for name in SHORTHANDS if name in rest}
    warm = rest.pop("warm_grading", None)
    grading = rest.pop("grading", None) or ("cold" if warm is False else "warm")
    try:
        built = sandbox_settings(backend, options, grading=grading, shorthands=shorthands)
        if not rest:
            return built
        return SandboxConfig.model_validate({**built.model_dump(), **rest})
    except ValidationError as exc:
        problems = "; ".join(f"eval.sandbox.{_where(e)}: {e['msg']}" for e in exc.errors())
        raise SandboxRefusedError(problems) from None
    except ConfigError as exc:
        raise SandboxRefusedError(str(exc)) from None


def _model(section: dict[str, Any], source: str) -> dict[str, Any] | None:
    """``eval.model`` as the agents' complete model settings (None without a model named, as
    the flags of the model without ``--model`` name none).

    Raises:
        ConfigError: settings the agents' model refuses.
    """
    try:
        choice = ModelChoice.model_validate(section)
    except ValidationError as exc:
        problems = "; ".join(f"eval.model.{_where(e)}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{source}: {problems}") from exc
    if choice.spec is None:
        return None
    return model_settings(choice.model_dump(exclude_none=True))


def _where(error: Any) -> str:
    return ".".join(str(p) for p in error["loc"])


def _problem(error: Any) -> str:
    """One validation problem in the words of the command line and the run file: a required
    option given nowhere is named as the flag and the file's key."""
    where = _where(error) or "run"
    if error["type"] == "missing":
        flag = next((name for name, path in FLAT.items() if path == where), None)
        if flag is not None:
            return f"--{flag.replace('_', '-')} is required (or `{where}:` in a --config run file)"
    return f"{where}: {error['msg']}"
