"""The OpenAI Agents SDK's own loop inside an rcb-env episode: an ``Agent`` whose function
tools are the episode's tools (their names and JSON schemas as the environment defines them),
its chat-completions model pointed at any OpenAI-compatible endpoint, run by its ``Runner``.
The SDK's tracing (which would send traces to OpenAI) is turned off."""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

from rcb_agents.frameworks.base import FrameworkAgent

INSTRUCTIONS = (
    "You are a coding agent working in a repository through the tools you are given. Implement "
    "the masked block the task describes, check it with run_tests, then call submit."
)


class OpenAIAgentsAgent(FrameworkAgent):
    name = "openai-agents"
    framework: ClassVar[str] = "openai-agents"

    def run_framework(self, task: str, base_url: str) -> None:
        from openai import AsyncOpenAI

        from agents import (
            Agent,
            FunctionTool,
            ModelSettings,
            OpenAIChatCompletionsModel,
            Runner,
            set_tracing_disabled,
        )

        set_tracing_disabled(True)

        def function_tool(name: str, description: str, schema: dict[str, Any]) -> Any:
            async def invoke(_ctx: Any, arguments: str) -> str:
                args = json.loads(arguments) if arguments else {}
                return await asyncio.to_thread(self.tool, name, args)

            return FunctionTool(
                name=name,
                description=description,
                params_json_schema=schema,
                on_invoke_tool=invoke,
                strict_json_schema=False,
            )

        client = AsyncOpenAI(base_url=base_url, api_key=self.api_key, max_retries=0)
        agent = Agent(
            name="rcb-env",
            instructions=INSTRUCTIONS,
            model=OpenAIChatCompletionsModel(model=self.model.name, openai_client=client),
            model_settings=ModelSettings(temperature=self.model.temperature),
            tools=[function_tool(t.name, t.description, t.parameters) for t in self.tools],
        )
        asyncio.run(Runner.run(agent, task, max_turns=self.max_turns))
