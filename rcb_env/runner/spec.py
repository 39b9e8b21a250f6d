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
"""

from __future__ import annotations

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
from rcb_env.sandbox import SandboxConfig, sandbox_config


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
        return cls.build({**data, **(overrides or {})}, source=str(path))

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
        """The sandbox of the run: ``base``, ``pool`` and ``cgroup_limits``, when given, are
        the backend's options.

        Raises:
            ConfigError: one the chosen backend does not have.
        """
        return sandbox_config(
            self.sandbox,
            warm_grading=self.grading == "warm",
            docker_base=self.base,
            pool_size=self.pool or None,
            cgroup_limits=self.cgroup_limits,
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
