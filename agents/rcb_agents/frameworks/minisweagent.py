"""mini-swe-agent's own loop inside an rcb-env episode: its ``DefaultAgent`` with its LiteLLM
model (the built-in ``mini.yaml`` templates, a ``bash`` tool), and an environment implementing
its ``Environment`` protocol on the episode's sandbox: each command is a ``run_command`` step,
and its submit command (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``) submits the episode."""

from __future__ import annotations

import os
import platform
import re
from typing import Any, ClassVar

from rcb_agents.frameworks.base import FrameworkAgent

#: mini-swe-agent's own end-of-task command.
SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_EXIT = re.compile(r"\[exit code (-?\d+)\]\s*$")


class SandboxEnvironment:
    """mini-swe-agent's ``Environment`` protocol, backed by the episode (``execute`` runs a
    command in the episode's sandbox as one step)."""

    def __init__(self, agent: FrameworkAgent) -> None:
        self.agent = agent
        self.config: dict[str, Any] = {"cwd": "/workspace"}

    def execute(
        self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None
    ) -> dict[str, Any]:
        from minisweagent.exceptions import LimitsExceeded, Submitted

        command = str(action.get("command", ""))
        if self.agent.ended.is_set():
            raise LimitsExceeded(_exit("the environment ended the episode", "EpisodeEnded"))
        if command.strip() == SUBMIT_COMMAND:
            text = self.agent.tool("submit", {})
            raise Submitted(_exit(text, "Submitted"))
        text = self.agent.tool("run_command", {"command": command})
        if self.agent.ended.is_set():  # that command used up the episode's budget
            raise LimitsExceeded(_exit(text, "EpisodeEnded"))
        found = _EXIT.search(text)
        return {"output": text, "returncode": int(found.group(1)) if found else 0,
                "exception_info": ""}  # fmt: skip

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment_type": "rcb-env sandbox"}}}


def _exit(content: str, status: str) -> dict[str, Any]:
    return {"role": "exit", "content": content, "extra": {"exit_status": status, "submission": ""}}


class MiniSweAgent(FrameworkAgent):
    name = "mini-swe-agent"
    framework: ClassVar[str] = "mini-swe-agent"

    def run_framework(self, task: str, base_url: str) -> None:
        # no banner on import, and LiteLLM's bundled cost map instead of fetching one
        os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.config import builtin_config_dir
        from minisweagent.models.litellm_model import LitellmModel

        litellm.suppress_debug_info = True  # no "Provider List" banner for unpriced models
        from ruamel.yaml import YAML

        config = YAML(typ="safe").load((builtin_config_dir / "mini.yaml").read_text())
        model_cfg = dict(config.get("model") or {})
        kwargs = {**(model_cfg.pop("model_kwargs", None) or {}), "api_base": base_url,
                  "api_key": self.api_key}  # fmt: skip
        if self.model.temperature is not None:
            kwargs["temperature"] = self.model.temperature
        model = LitellmModel(
            **model_cfg,
            model_name=f"openai/{self.model.name}",
            model_kwargs=kwargs,
            cost_tracking="ignore_errors",
        )
        agent_cfg = {**(config.get("agent") or {}), "step_limit": self.max_turns, "cost_limit": 0}
        DefaultAgent(model, SandboxEnvironment(self), **agent_cfg).run(task)
