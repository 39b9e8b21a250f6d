"""The agent CLIs rcb-env runs inside a sandbox, pinned: where each is installed
(``$RCB_ENV_HOME/agents/<name>-<version>/``, once, by :func:`install`, which
``scripts/install.sh`` and ``rcb-env agents install`` call; offline afterwards), where its
program is, and the environment, configuration and flags that keep it headless and offline
with its model behind the proxy (measured: ``docs/design/agent-clis.md``). Each CLI's adapter
(:data:`ADAPTERS`, :class:`Adapter`) says how to start it headless in the sandbox and how to
read its result.

They reach the proxy through its unix socket bound into the sandbox: Claude Code directly
(``ANTHROPIC_UNIX_SOCKET``), Codex and mini-swe-agent through a forwarder on the sandbox's own
loopback (:func:`rcb_agents.models.proxy.forwarder_command`), having no unix-socket option.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rcb_agents.models.proxy import Wire, forwarder_command
from rcb_env import config
from rcb_env.errors import ConfigError
from rcb_env.frozen import Frozen
from rcb_env.sandbox.base import Program


class AgentCli(Frozen):
    """One pinned CLI as its package manager installs it."""

    name: str
    version: str
    package: str
    """The package (npm: installed as ``package@version``; pypi: ``package==version``)."""
    binary: str
    """Its program, relative to the install folder (for npm a native binary: node is not
    needed to run it)."""
    installer: Literal["npm", "pypi"] = "npm"
    """Where it comes from: npm into the folder, or PyPI into a venv that is the folder."""
    wire: Wire = "messages"
    """The wire format it speaks to its model."""
    provider: Literal["anthropic", "openai"] = "anthropic"
    """Whose models it calls (``--model anthropic:NAME`` / ``openai:NAME``)."""

    def folder(self, home: Path | None = None) -> Path:
        """Its install folder under the rcb-env home."""
        return (home or config.rcb_home()) / "agents" / f"{self.name}-{self.version}"

    def executable(self, home: Path | None = None) -> Path | None:
        """Its binary, or None when it is not installed (``scripts/install.sh`` installs it)."""
        path = self.folder(home) / self.binary
        return path if path.is_file() else None


CLAUDE_CODE = AgentCli(
    name="claude-code",
    version="2.1.328",
    package="@anthropic-ai/claude-code",
    binary="node_modules/@anthropic-ai/claude-code/bin/claude.exe",
)
CODEX = AgentCli(
    name="codex",
    version="0.169.0",
    package="@openai/codex",
    binary="node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
    wire="responses",
    provider="openai",
)
MINI_SWE_AGENT = AgentCli(
    name="mini-swe-agent-cli",
    version="2.4.6",
    package="mini-swe-agent",
    binary="bin/mini",
    installer="pypi",
    wire="chat",
    provider="openai",
)
CLIS = {cli.name: cli for cli in (CLAUDE_CODE, CODEX, MINI_SWE_AGENT)}

#: Codex's token variable (its provider's ``env_key``).
CODEX_TOKEN_VARIABLE = "RCB_MODEL_TOKEN"


def claude_env(socket_path: str, token: str) -> dict[str, str]:
    """Claude Code's environment: every request over the proxy's socket with the episode token;
    no telemetry, update check or connectivity probe (zero DNS lookups, measured); no retries
    (the proxy, not the CLI, tells an upstream failure from the agent's); root allowed to skip
    the permission prompts (``IS_SANDBOX``)."""
    return {
        "ANTHROPIC_BASE_URL": "http://localhost",
        "ANTHROPIC_UNIX_SOCKET": socket_path,
        "ANTHROPIC_API_KEY": token,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "IS_SANDBOX": "1",
    }


def claude_argv(binary: str, prompt: str | None, model: str) -> list[str]:
    """Headless, one JSON result on stdout, its own file tools, no prompts; the task from
    ``prompt`` or (None) its standard input."""
    return [binary, "-p", *([prompt] if prompt is not None else []), "--output-format", "json",
            "--model", model, "--tools", "Bash,Read,Edit,Write",
            "--dangerously-skip-permissions"]  # fmt: skip


def codex_config(model: str, port: int) -> str:
    """``$CODEX_HOME/config.toml``: a custom provider (plain POSTs, no websocket) on the
    forwarder's port, the token from :data:`CODEX_TOKEN_VARIABLE`, no retries; no update check,
    analytics, plugins or shell snapshot (which would save the environment to a file); the
    agent's commands get no variable named like a key or token."""
    return f"""\
model = "{model}"
model_provider = "rcb"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[features]
shell_snapshot = false
plugins = false
apps = false
remote_plugin = false
goals = false

[shell_environment_policy]
inherit = "core"
exclude = ["*KEY*", "*TOKEN*"]

[model_providers.rcb]
name = "rcb"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
env_key = "{CODEX_TOKEN_VARIABLE}"
request_max_retries = 0
stream_max_retries = 0
"""


def codex_env(codex_home: str, token: str) -> dict[str, str]:
    return {"CODEX_HOME": codex_home, CODEX_TOKEN_VARIABLE: token}


def codex_argv(binary: str, prompt: str | None) -> list[str]:
    """Headless (``exec``), events as JSON lines, no approvals and no sandbox of its own (it
    runs in rcb-env's); the task from ``prompt`` or (None) its standard input."""
    return [binary, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
            "--json", *(["--", prompt] if prompt is not None else [])]  # fmt: skip


#: mini-swe-agent's variables: no first-run questions, no cost-map download (litellm's own
#: table, offline: zero DNS lookups, measured), a model it has no price for is fine (the proxy
#: prices the calls), no retries of its own (by default it tries a failing call 10 times with
#: backoff: an upstream 500 kept it busy until the wall-clock budget, measured; the proxy's log
#: decides what was the endpoint's failure).
MINI_ENV = {
    "MSWEA_CONFIGURED": "true",
    "MSWEA_COST_TRACKING": "ignore_errors",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
}


def mini_argv(binary: str, task_file: str, model: str, port: int, output: str) -> list[str]:
    """Headless (``--yolo``, ends when it submits), its builtin config, the task from a config
    file of its own (``run.task``: a statement with a paper is too long for an argument), the
    model's OpenAI-compatible endpoint on the forwarder's port, no cost limit of its own (the
    episode's budgets are the proxy's), its trajectory written to ``output``."""
    return [binary, "--yolo", "--exit-immediately", "-m", f"openai/{model}",
            "-o", output, "-c", "mini.yaml", "-c", task_file,
            "-c", f"model.model_kwargs.api_base=http://127.0.0.1:{port}/v1",
            "-c", "agent.cost_limit=0", "-c", "model.model_kwargs.num_retries=0"]  # fmt: skip


# installing ------------------------------------------------------------------------------------
STAMP = ".rcb-stamp"


def installed(cli: AgentCli, home: Path | None = None) -> bool:
    """Whether this pinned version is installed (its stamp written last by :func:`install`)."""
    try:
        return (cli.folder(home) / STAMP).read_text().strip() == _stamp(cli)
    except OSError:
        return False


def _stamp(cli: AgentCli) -> str:
    return f"{cli.package}@{cli.version}"


def install(
    cli: AgentCli,
    home: Path | None = None,
    *,
    python: str | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> Path:
    """Install the pinned ``cli`` into its folder under the rcb-env home, once (quick when it is
    there): npm into the folder, or PyPI into a venv that is the folder (made from ``python``,
    default ``$TASK_PYTHON_BASE`` or ``/usr/bin/python3``: outside any home folder, so the
    sandbox user can run it). Readable by every user; offline afterwards.

    Raises:
        ConfigError: npm (or the interpreter) is missing, or the install failed.
    """
    dest = cli.folder(home)
    if installed(cli, home):
        return dest
    log(f"installing the agent CLI {_stamp(cli)} into {dest}")
    # In place (a venv's scripts name their interpreter by its path); the stamp last, so a
    # broken half is never taken for an install.
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    if cli.installer == "npm":
        npm = shutil.which("npm")
        if npm is None:
            raise ConfigError(f"{cli.name}: npm is not installed (apt-get install npm)")
        # (its engine warning is expected: the native binary it ships needs no node at run time)
        argv = [npm, "install", "--prefix", str(dest), "--no-audit", "--no-fund",
                "--loglevel=error", f"{cli.package}@{cli.version}"]  # fmt: skip
        _run(cli, argv)
    else:
        base = python or os.environ.get("TASK_PYTHON_BASE") or "/usr/bin/python3"
        if not Path(base).is_file():
            base = sys.executable
        _run(cli, [base, "-m", "venv", str(dest)])
        _run(cli, [str(dest / "bin" / "python"), "-m", "pip", "install", "-q",
                   "--disable-pip-version-check", f"{cli.package}=={cli.version}"])  # fmt: skip
    for root, dirs, files in os.walk(dest):
        for name in (*dirs, *files):
            path = Path(root, name)
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
    dest.chmod(0o755)
    for folder in (dest.parent, dest.parent.parent):
        folder.chmod(folder.stat().st_mode | 0o005)
    (dest / STAMP).write_text(_stamp(cli) + "\n")
    return dest


def _run(cli: AgentCli, argv: list[str]) -> None:
    run = subprocess.run(argv, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise ConfigError(f"installing {cli.name} failed ({' '.join(argv[:3])}): "
                          f"{(run.stderr or run.stdout).strip()[-1500:]}")  # fmt: skip


# adapters --------------------------------------------------------------------------------------
#: The port of the in-sandbox forwarder (the sandbox's own loopback).
FORWARDER_PORT = 18080

#: What every CLI is told besides the task statement (it has no submit tool).
PROMPT_TAIL = (
    "\n\nWork in the current folder with your own tools: write the code into the file, in place "
    "of the block. There is no submit tool: when you end, the file as you leave it is graded."
)


@dataclass(frozen=True)
class Launch:
    """Where a CLI runs: its binary and the sandbox's view of things."""

    binary: str
    """Its program (a path inside the sandbox: the install folder is bound at its own path)."""
    prompt: str
    model: str
    socket: str
    """The proxy's unix socket."""
    token: str
    """The episode's token (the only credential it gets)."""
    home: str
    """Its writable home folder."""
    python: str
    """An interpreter inside the sandbox (the forwarder's)."""


@dataclass(frozen=True)
class Adapter:
    """How one CLI runs headless in an episode's sandbox and how its result is read."""

    cli: AgentCli
    program: Callable[[Launch], tuple[list[str], dict[str, str], dict[str, str]]]
    """argv, environment and files of its home (relative path -> text)."""
    result: Callable[[str, Path], dict[str, Any]]
    """What it reported (its stdout, its home on the host) as a short summary for the record."""

    def build(self, launch: Launch, read_only: tuple[str, ...], timeout_s: float) -> Program:
        argv, env, files = self.program(launch)
        return Program(argv=tuple(argv), env=env, read_only=read_only, files=files,
                       timeout_s=timeout_s)  # fmt: skip


PROMPT_FILE = "prompt.md"


def _stdin_from(argv: list[str]) -> list[str]:
    """``argv`` with its standard input read from the file ``$RCB_PROMPT`` (a task statement
    with its paper is longer than an argument may be)."""
    return ["/bin/sh", "-c", 'exec "$0" "$@" < "$RCB_PROMPT"', *argv]


def _claude(launch: Launch) -> tuple[list[str], dict[str, str], dict[str, str]]:
    prompt = f"{launch.home}/{PROMPT_FILE}"
    env = {**claude_env(launch.socket, launch.token), "RCB_PROMPT": prompt}
    argv = _stdin_from(claude_argv(launch.binary, None, launch.model))
    return argv, env, {PROMPT_FILE: launch.prompt}


def _codex(launch: Launch) -> tuple[list[str], dict[str, str], dict[str, str]]:
    prompt = f"{launch.home}/{PROMPT_FILE}"
    files = {"codex/config.toml": codex_config(launch.model, FORWARDER_PORT),
             PROMPT_FILE: launch.prompt}  # fmt: skip
    env = {**codex_env(f"{launch.home}/codex", launch.token), "RCB_PROMPT": prompt}
    argv = [*forwarder_command(launch.python, FORWARDER_PORT, launch.socket),
            *_stdin_from(codex_argv(launch.binary, None))]  # fmt: skip
    return argv, env, files


def _mini(launch: Launch) -> tuple[list[str], dict[str, str], dict[str, str]]:
    env = {**MINI_ENV, "OPENAI_API_KEY": launch.token}
    out = f"{launch.home}/traj.json"
    # JSON is YAML: its config file reads it as is
    files = {"task.yaml": json.dumps({"run": {"task": launch.prompt}})}
    argv = [*forwarder_command(launch.python, FORWARDER_PORT, launch.socket),
            *mini_argv(launch.binary, f"{launch.home}/task.yaml", launch.model, FORWARDER_PORT,
                       out)]  # fmt: skip
    return argv, env, files


def _last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def claude_result(stdout: str, _home: Path) -> dict[str, Any]:
    """Its JSON result (``--output-format json``): turns, how it ended, its own usage count."""
    data = _last_json(stdout)
    keys = ("subtype", "is_error", "num_turns", "stop_reason", "terminal_reason",
            "api_error_status", "usage")  # fmt: skip
    return {k: data[k] for k in keys if k in data}


def codex_result(stdout: str, _home: Path) -> dict[str, Any]:
    """Its JSON lines (``exec --json``): the turns completed or failed, its usage, the error."""
    turns = failed = 0
    usage: dict[str, Any] = {}
    error = None
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("type") == "turn.completed":
            turns += 1
            usage = event.get("usage") or usage
        elif event.get("type") == "turn.failed":
            failed += 1
            error = (event.get("error") or {}).get("message")
    return {"turns_completed": turns, "turns_failed": failed, "usage": usage, "error": error}


def mini_result(_stdout: str, home: Path) -> dict[str, Any]:
    """Its trajectory file: how it exited and its own count of calls."""
    try:
        info = json.loads((home / "traj.json").read_text()).get("info") or {}
    except (OSError, ValueError):
        return {}
    stats = info.get("model_stats") or {}
    return {"exit_status": info.get("exit_status"), "api_calls": stats.get("api_calls"),
            "mini_version": info.get("mini_version")}  # fmt: skip


ADAPTERS: Mapping[str, Adapter] = {
    CLAUDE_CODE.name: Adapter(CLAUDE_CODE, _claude, claude_result),
    CODEX.name: Adapter(CODEX, _codex, codex_result),
    MINI_SWE_AGENT.name: Adapter(MINI_SWE_AGENT, _mini, mini_result),
}


def listing(home: Path | None = None) -> list[dict[str, Any]]:
    """Every pinned CLI: name, version, installed or not, wire format (``rcb-env agents
    list``)."""
    return [
        {"name": c.name, "version": c.version, "package": c.package, "installer": c.installer,
         "installed": installed(c, home), "wire": c.wire, "provider": c.provider}
        for c in CLIS.values()
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """``python -m rcb_agents.clis install [NAME...]`` (``scripts/install.sh``; all by
    default)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "install":
        raise SystemExit("usage: python -m rcb_agents.clis install [NAME...]")
    for name in args[1:] or list(CLIS):
        if name not in CLIS:
            raise SystemExit(f"unknown agent CLI {name!r}: one of {', '.join(CLIS)}")
        cli = CLIS[name]
        if cli.installer == "npm" and shutil.which("npm") is None and not installed(cli):
            print(f"[install] WARNING: npm not found: {name} is not installed", flush=True)
            continue
        install(cli, log=lambda m: print(f"[install] {m}", flush=True))


if __name__ == "__main__":
    main()
