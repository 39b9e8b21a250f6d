"""One path from the sandbox flags to ``SandboxConfig.options``: ``--sandbox-option KEY=VALUE``
on every command that takes ``--sandbox``, the old ``--base/--pool/--cgroup-limits`` as
shorthands for the same options, run files' ``sandbox: {backend, options}``, and a refused
option as a usage error naming the backend and the option. Nothing here starts a sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from rcb_env.cli import app, cli
from rcb_env.errors import ConfigError
from rcb_env.runner.spec import RunSpec, sandbox_settings
from rcb_env.sandbox import SandboxConfig
from rcb_env.sandbox.backends.bwrap import BwrapBackend, BwrapOptions

#: Every command that takes --sandbox, as its words on the command line.
SANDBOXED = (
    ("eval", "--agent", "oracle"),
    ("validate",),
    ("audit",),
    ("hacks",),
    ("conformance",),
    ("mcp", "serve"),
    ("regrade", "."),
    ("synth", "--pset", "tasks", "-o", "synth-out"),
)


_MAPPING = app.sandbox_or_usage


class _Stop(Exception):
    """Raised by the spy once the command has its sandbox: nothing runs."""


def _commands() -> list[click.Command]:
    found = []
    for words in SANDBOXED:
        command: Any = cli
        for word in words:
            if isinstance(command, click.Group) and word in command.commands:
                command = command.commands[word]
        found.append(command)
    return found


def test_every_command_that_takes_a_sandbox_takes_sandbox_options() -> None:
    """And no other command was left out of the list above."""
    listed = {c.name for c in _commands()}

    def walk(group: click.Group) -> set[str | None]:
        names: set[str | None] = set()
        for command in group.commands.values():
            if isinstance(command, click.Group):
                names |= walk(command)
            elif any(p.name == "sandbox" for p in command.params):
                names.add(command.name)
        return names

    assert walk(cli) == listed
    for command in _commands():
        flags = {opt for p in command.params for opt in getattr(p, "opts", ())}
        assert "--sandbox-option" in flags, command.name


def _sandbox_of(monkeypatch: pytest.MonkeyPatch, *args: str) -> SandboxConfig:
    """The config a command builds from ``args``, caught before it runs anything."""
    seen: list[SandboxConfig] = []

    def spy(*a: Any, **k: Any) -> SandboxConfig:
        seen.append(_MAPPING(*a, **k))
        raise _Stop

    monkeypatch.setattr(app, "sandbox_or_usage", spy)
    result = CliRunner().invoke(cli, list(args))
    assert isinstance(result.exception, _Stop), result.output
    return seen[0]


@pytest.mark.parametrize("words", [w for w in SANDBOXED if w[0] != "eval"])
def test_a_sandbox_option_reaches_the_backends_options(
    words: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _sandbox_of(monkeypatch, *words, "--sandbox", "docker", "--sandbox-option", "pool_size=2")
    assert cfg.backend == "docker"
    assert cfg.options["pool_size"] == 2  # the backend's model made it a number


def test_bwrap_options_from_the_command_line_reach_the_backend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg = _sandbox_of(
        monkeypatch,
        "audit",
        "--sandbox",
        "bwrap",
        "--sandbox-option",
        "cgroup_limits=off",
        "--sandbox-option",
        "cgroup_parent=mine",
        "--sandbox-option",
        'read_only=["/srv/cache"]',
    )
    backend = BwrapBackend(cfg, tmp_path)  # "off": no cgroup is checked
    try:
        assert backend.options == BwrapOptions(
            cgroup_limits="off", cgroup_parent="mine", read_only=(Path("/srv/cache"),)
        )
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("shorthand", "option"),
    [
        (("--sandbox", "docker", "--base", "my/base:1"), "docker_base=my/base:1"),
        (("--sandbox", "bwrap", "--cgroup-limits", "off"), "cgroup_limits=off"),
    ],
)
@pytest.mark.parametrize("command", ["audit", "hacks", "conformance"])
def test_a_shorthand_and_its_option_give_equal_configs(
    command: str, shorthand: tuple[str, ...], option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_flag = _sandbox_of(monkeypatch, command, *shorthand)
    by_option = _sandbox_of(monkeypatch, command, *shorthand[:2], "--sandbox-option", option)
    both = _sandbox_of(monkeypatch, command, *shorthand, "--sandbox-option", option)
    assert by_flag == by_option == both


def test_the_shorthands_are_the_same_function_as_the_options() -> None:
    """``--pool`` (eval) too, and the run spec's mapping is the commands' mapping."""
    assert sandbox_settings("docker", shorthands={"pool": 3, "base": "b"}) == sandbox_settings(
        "docker", ["pool_size=3", "docker_base=b"]
    )
    spec = RunSpec.build({"agent": "oracle", "sandbox": "docker", "pool": 3, "base": "b"})
    pairs = RunSpec.build(
        {
            "agent": "oracle",
            "sandbox": "docker",
            "sandbox_options": ("pool_size=3", "docker_base=b"),
        }
    )
    assert (
        spec.sandbox_config()
        == pairs.sandbox_config()
        == sandbox_settings("docker", {"pool_size": 3, "docker_base": "b"})
    )
    assert not sandbox_settings("auto", grading="cold").warm_grading


@pytest.mark.parametrize("words", SANDBOXED)
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--sandbox", "docker", "--sandbox-option", "nope=1"),
         "the docker backend has no option 'nope'"),
        (("--sandbox", "docker", "--sandbox-option", "pool_size=many"),
         "the docker backend's options: pool_size"),
        (("--sandbox", "bwrap", "--sandbox-option", "pool_size=2"),
         "the bwrap backend has no option 'pool_size'"),
        (("--sandbox-option", "pool_size=2"),
         "--sandbox auto would pick bwrap: the bwrap backend has no option 'pool_size'"),
        (("--sandbox", "docker", "--sandbox-option", "pool_size"),
         "--sandbox-option 'pool_size': expected KEY=VALUE"),
    ],
)  # fmt: skip
def test_a_refused_option_is_a_one_line_usage_error_naming_backend_and_option(
    words: tuple[str, ...], args: tuple[str, ...], said: str, tmp_path: Path
) -> None:
    runs = ("--runs-dir", str(tmp_path)) if words[0] in ("eval", "mcp") else ()
    result = CliRunner().invoke(cli, [*words, *args, *runs])
    assert result.exit_code == 2, result.output  # click's usage errors
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert said in line, result.output
    assert not list(tmp_path.iterdir())  # nothing ran


def test_a_shorthand_and_an_option_that_disagree_are_refused() -> None:
    with pytest.raises(ConfigError, match="--base a and --sandbox-option docker_base=b disagree"):
        sandbox_settings("docker", ["docker_base=b"], shorthands={"base": "a"})
    result = CliRunner().invoke(
        cli, ["hacks", "--sandbox", "docker", "--base", "a", "--sandbox-option", "docker_base=b"]
    )
    assert result.exit_code == 2
    assert "disagree" in result.output


def test_a_value_that_looks_like_json_must_be_json() -> None:
    with pytest.raises(ConfigError, match="--sandbox-option read_only: not JSON"):
        sandbox_settings("bwrap", ["read_only=[/srv"])


def test_a_run_file_names_the_backend_and_its_options(tmp_path: Path) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(
        "agent: oracle\nsandbox:\n  backend: docker\n"
        "  options: {docker_base: 'my/base:1', pool_size: 2}\n"
    )
    assert RunSpec.load(run_file).sandbox_config() == sandbox_settings(
        "docker", shorthands={"base": "my/base:1", "pool": 2}
    )
    # a flag on the command line wins, option by option
    flags = RunSpec.load(run_file, {"sandbox_options": ("pool_size=5",)}).sandbox_config()
    assert flags.options["pool_size"] == 5
    assert flags.options["docker_base"] == "my/base:1"
    run_file.write_text("agent: oracle\nsandbox: {backend: docker, image: x}\n")
    with pytest.raises(ConfigError, match="sandbox is a backend's name or"):
        RunSpec.load(run_file)
    run_file.write_text("agent: oracle\nsandbox: {backend: docker, options: {nope: 1}}\n")
    with pytest.raises(ConfigError, match="the docker backend has no option 'nope'"):
        RunSpec.load(run_file).sandbox_config()


def test_eval_refuses_a_bad_option_from_a_run_file_as_a_usage_error(tmp_path: Path) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(
        f"agent: oracle\nruns_dir: {tmp_path / 'runs'}\n"
        "sandbox: {backend: docker, options: {nope: 1}}\n"
    )
    result = CliRunner().invoke(cli, ["eval", "--config", str(run_file)])
    assert result.exit_code == 2, result.output
    assert "the docker backend has no option 'nope'" in result.output
    assert not (tmp_path / "runs").exists()
