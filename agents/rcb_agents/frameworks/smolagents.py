"""smolagents' own loop inside an rcb-env episode: a ``ToolCallingAgent`` with an
OpenAI-compatible server model, the episode's tools as its tools (inputs from their JSON
schemas). Its ``final_answer`` tool ends its run; ``submit`` ends the episode."""

from __future__ import annotations

from typing import Any, ClassVar

from rcb_agents.frameworks.base import FrameworkAgent

_TYPES = {"string", "boolean", "integer", "number", "array", "object"}


class SmolagentsAgent(FrameworkAgent):
    name = "smolagents"
    framework: ClassVar[str] = "smolagents"

    def _tool(self, name: str, description: str, schema: dict[str, Any]) -> Any:
        from smolagents import Tool

        required = set(schema.get("required", []))
        inputs = {}
        for key, prop in (schema.get("properties") or {}).items():
            kind = prop.get("type") if prop.get("type") in _TYPES else "string"
            text = prop.get("description") or key
            if "enum" in prop:
                text += f" (one of: {', '.join(map(str, prop['enum']))})"
            inputs[key] = {"type": kind, "description": text}
            if key not in required:
                inputs[key]["nullable"] = True
        agent = self

        def forward(_self: Any, **kwargs: Any) -> str:
            return agent.tool(name, {k: v for k, v in kwargs.items() if v is not None})

        cls = type(
            f"Rcb_{name}",
            (Tool,),
            {"name": name, "description": description, "inputs": inputs, "output_type": "string",
             "skip_forward_signature_validation": True, "forward": forward},
        )  # fmt: skip
        return cls()

    def run_framework(self, task: str, base_url: str) -> None:
        from smolagents import OpenAIServerModel, ToolCallingAgent

        model = OpenAIServerModel(
            model_id=self.model.name,
            api_base=base_url,
            api_key=self.api_key,
            **({} if self.model.temperature is None else {"temperature": self.model.temperature}),
        )
        tools = [self._tool(t.name, t.description, t.parameters) for t in self.tools]
        agent = ToolCallingAgent(tools=tools, model=model, max_steps=self.max_turns,
                                 verbosity_level=0)  # fmt: skip
        self._running = agent
        agent.run(task)

    def stop_framework(self) -> None:
        running = getattr(self, "_running", None)
        if running is not None:
            running.interrupt()  # smolagents stops before its next step
