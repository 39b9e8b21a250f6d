"""An agent CLI (Claude Code, Codex, mini-swe-agent: :mod:`rcb_agents.clis`) as an episode's
agent: a program run inside the episode's sandbox (:class:`rcb_env.agent.ProgramAgent`), its
model traffic through the run's one metering proxy on the host, which holds the real key.

Each episode opens a :class:`~rcb_agents.models.proxy.Tap` on the run's proxy with the episode's
remaining token, cost and model-call budgets and hands the CLI its token; the CLI runs in the
masked workspace with the task statement as its prompt until it exits or a budget ends it.
Then the driver grades the workspace as it stands. How it ended:

- the proxy refused a call past a budget -> that budget's stop reason (``truncated``);
- the driver's runner killed it at the wall-clock budget -> ``budget_wall_s``;
- the endpoint failed (the tap says ``infrastructure``) -> :class:`ModelError`: the episode is
  an infrastructure failure, never reward 0;
- it exited on its own, with success or not -> ``agent_stopped``; a crash (a non-zero exit) is
  the agent's failure, said in the record (:meth:`CliAgent.describe`: ``exit_code``,
  ``crashed``).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rcb_agents.clis import PROMPT_TAIL, Adapter, Launch
from rcb_agents.models.client import ModelConfig
from rcb_agents.models.pricing import load_prices
from rcb_agents.models.proxy import Budget, RecordingProxy, Tap, api_key_from_env
from rcb_agents.models.types import ModelCall
from rcb_env import config
from rcb_env.errors import ModelError, SandboxError
from rcb_env.sandbox.program import ProgramRunner
from rcb_env.tools.actions import ToolSpec

#: The endpoints a provider's CLI calls when the run names none.
DEFAULT_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}


class RunProxy:
    """The run's one model proxy (started on the first episode, closed at exit): on the host,
    holding the real key from the host's environment (``ANTHROPIC_API_KEY`` /
    ``OPENAI_API_KEY``), listening on a unix socket in a folder of its own that each sandbox
    binds read-only."""

    def __init__(self, model: ModelConfig, api_key: str | None = None) -> None:
        self.model = model
        self.api_key = api_key
        self._proxy: RecordingProxy | None = None
        self._folder: Path | None = None
        self._lock = threading.Lock()

    def get(self) -> RecordingProxy:
        with self._lock:
            if self._proxy is None:
                folder = Path(tempfile.mkdtemp(prefix="rcb-proxy-", dir=config.scratch_dir()))
                folder.chmod(0o755)
                provider = self.model.provider
                key = self.api_key if self.api_key is not None else api_key_from_env(provider)
                self._proxy = RecordingProxy(
                    self.model.base_url or DEFAULT_URLS.get(provider, DEFAULT_URLS["openai"]),
                    prices=load_prices(self.model.prices),
                    concurrency=self.model.concurrency,
                    provider=provider,
                    api_key=key,
                    unix_socket=folder / "model.sock",
                ).__enter__()
                self._folder = folder
                atexit.register(self.close)
            return self._proxy

    def close(self) -> None:
        with self._lock:
            if self._proxy is not None:
                self._proxy.close()
                self._proxy = None
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None


class CliAgent:
    """One episode of an agent CLI (see the module). Built per episode by the registry's
    factory, which shares one :class:`RunProxy` among them."""

    def __init__(self, adapter: Adapter, model: ModelConfig, proxy: RunProxy) -> None:
        self.adapter = adapter
        self.cli = adapter.cli
        self.name = adapter.cli.name
        self.model = model
        self.proxy = proxy
        self.tap: Tap | None = None
        self.exit: dict[str, Any] = {}
        """How the program ended (exit code, crashed, timed out, its stderr's tail)."""
        self.result: dict[str, Any] = {}
        """What the CLI itself reported (its result summary)."""

    # the Agent protocol: it is driven through work(), not act()
    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        raise TypeError(f"{self.name} is a program in the sandbox: Episode.run drives its work()")

    def work(self, statement: str, info: dict[str, Any], runner: ProgramRunner) -> str:
        """Run the CLI to its end; the stop reason (see the module).

        Raises:
            ModelError: the endpoint failed it.
            SandboxError: it is not installed, or the sandbox could not run it.
        """
        binary = self.cli.executable()
        if binary is None:
            raise SandboxError(
                f"{self.cli.name} {self.cli.version} is not installed: "
                f"rcb-env agents install {self.cli.name}"
            )
        proxy = self.proxy.get()
        assert proxy.unix_socket is not None
        left = info.get("budgets") or {}
        tokens, cost, calls = left.get("tokens"), left.get("cost"), left.get("model_calls")
        self.tap = tap = proxy.open_episode(
            Budget(
                tokens=None if tokens is None else int(tokens),
                cost_usd=cost,
                calls=None if calls is None else int(calls),
            )
        )
        launch = Launch(
            binary=str(binary),
            prompt=statement + PROMPT_TAIL,
            model=self.model.name,
            socket=str(proxy.unix_socket),
            token=tap.token,
            home=runner.home,
            python=runner.python,
        )
        program = self.adapter.build(
            launch,
            read_only=(str(self.cli.folder()), str(proxy.unix_socket.parent)),
            timeout_s=runner.wall_s if runner.wall_s is not None else 24 * 3600.0,
        )
        try:
            result = runner.run(program)
        finally:
            proxy.close_episode(tap)
        self.result = self.adapter.result(result.stdout, runner.host_home)
        stopped = tap.outcome != "ok" or runner.timed_out
        self.exit = {
            "exit_code": result.exit_code,
            "timed_out": runner.timed_out,
            "crashed": not stopped and result.exit_code != 0,
            "duration_s": round(result.duration_s, 3),
            "stderr_tail": result.stderr[-800:],
        }
        if tap.infrastructure is not None:
            raise ModelError(f"{self.cli.name}: {tap.infrastructure}")
        if runner.timed_out:
            return "budget_wall_s"
        budget = tap.cut_off_budget
        if budget is not None:
            return f"budget_{budget}"
        # Exiting with success is the CLI's own "done": graded like a submit (completed); a
        # CLI that failed is graded as it stands, as an agent that stopped without a submit.
        return "agent_stopped" if result.exit_code != 0 else "submit"

    def end(self, info: dict[str, Any]) -> None:
        pass

    # MeteredAgent: the proxy's record of the episode's calls
    def spent(self) -> tuple[int, float]:
        return (self.tap.tokens, self.tap.cost) if self.tap is not None else (0, 0.0)

    def drain_calls(self) -> Sequence[ModelCall]:
        return self.tap.drain() if self.tap is not None else []

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.cli.name,
            "version": self.cli.version,
            "kind": "agent-cli",
            "wire": self.cli.wire,
            "model": self.model.spec,
            **self.exit,
            "result": self.result,
        }
