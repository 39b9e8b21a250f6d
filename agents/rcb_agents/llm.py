"""The LLM baselines.

- :class:`ToolsAgent`: a tool-calling loop over the environment's tools (schemas generated from
  the environment's action models), for OpenAI-compatible chat completions and Anthropic messages.
- :class:`SingleShotAgent`: the paper's non-agentic protocol: one request with the paper, the
  context files and the masked file; the answer's last fenced Python block is the snippet body.

Prompts are rcb-env's own wording.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Sequence
from typing import Any

from rcb_agents.models import ChatModel, ModelCall, ToolCall, Turn
from rcb_env.agent import NUDGE, tools_system_prompt
from rcb_env.tools.actions import Action, ReadFile, Submit, ToolSpec

SINGLE_SHOT_SYSTEM = (
    "You are a careful research engineer. You will get a paper, some files of its repository, "
    "and one file in which a block of code has been replaced by a TODO comment. Write the code "
    "for that block. Answer with the block's code in one fenced ```python block, indented as it "
    "must stand in the file."
)
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


class _LLMAgent:
    name = "llm"

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.tokens = 0
        self.cost = 0.0

    def describe(self) -> dict[str, Any]:
        cfg = self.model.config
        return {
            "name": self.name,
            "model": cfg.spec,
            "base_url": cfg.base_url,
            "temperature": cfg.temperature,
            "max_output_tokens": cfg.max_output_tokens,
        }

    def drain_calls(self) -> list[ModelCall]:
        return self.model.drain_calls()

    def spent(self) -> tuple[int, float]:
        """Tokens and cost of the calls made so far in this episode."""
        return self.tokens, self.cost

    def _complete(self, system: str, transcript: Sequence[Turn], tools: Sequence[ToolSpec]) -> Any:
        completion = self.model.complete(system, transcript, tools)
        last = self.model.calls[-1]
        self.tokens += last.usage.total
        self.cost += last.cost
        return completion


class ToolsAgent(_LLMAgent):
    """One model call per step; the model's tool calls are the environment's actions."""

    name = "tools"
    max_nudges = 3

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        self.tools = list(tools)
        self.system = tools_system_prompt(info.get("task"))
        self.transcript: list[Turn] = [Turn(role="user", text=observation)]
        self.pending: list[ToolCall] = []
        self.answering: ToolCall | None = None
        self.tokens = 0
        self.cost = 0.0

    def act(self, observation: str, info: dict[str, Any]) -> Action | dict[str, Any] | str:
        if self.answering is not None:  # the observation answers the call we passed on
            self.transcript.append(
                Turn(role="tool", tool_call_id=self.answering.id, text=observation)
            )
            self.answering = None
        nudges = 0
        while not self.pending:
            completion = self._complete(self.system, self.transcript, self.tools)
            self.transcript.append(
                Turn(role="assistant", text=completion.text, tool_calls=completion.tool_calls)
            )
            self.pending = list(completion.tool_calls)
            if not self.pending:
                nudges += 1
                if nudges > self.max_nudges:
                    return Submit()
                self.transcript.append(Turn(role="user", text=NUDGE))
        call = self.pending.pop(0)
        self.answering = call
        # The environment validates: malformed arguments come back as an error observation
        # (the raw text is passed on, so the model sees what was wrong with it).
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            return call.arguments
        if not isinstance(arguments, dict):
            return call.arguments
        return {**arguments, "tool": call.name}

    def end(self, info: dict[str, Any]) -> None:
        self.pending = []
        self.answering = None


def extract_code(answer: str) -> str | None:
    """The last fenced Python block of an answer (None if there is none)."""
    blocks = _FENCE.findall(answer)
    return blocks[-1] if blocks else None


def indent_body(code: str, indent: str) -> str:
    """Re-indent a code block so that its least indented lines start at ``indent``."""
    dedented = textwrap.dedent(code.strip("\n"))
    lines = [indent + line if line.strip() else "" for line in dedented.splitlines()]
    return "\n".join(lines) + "\n"


class SingleShotAgent(_LLMAgent):
    """Reads the masked file and the context files through the tools (no model call), asks the
    model once, submits the last fenced block as the body. ``with_paper=False`` is the paper's
    "without paper" ablation."""

    name = "single-shot"

    def __init__(self, model: ChatModel, *, with_paper: bool = True) -> None:
        super().__init__(model)
        self.with_paper = with_paper

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "with_paper": self.with_paper}

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        self.info = info
        task = info["task"]  # the statement's structured fields (rcb_env.task.source)
        self.files = [task["file"], *[f for f in task["context_files"] if f != task["file"]]]
        self.contents: dict[str, str] = {}
        self.asking: str | None = None
        self.tokens = 0
        self.cost = 0.0

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if self.asking is not None:
            self.contents[self.asking] = observation
        remaining = [f for f in self.files if f not in self.contents]
        if remaining:
            self.asking = remaining[0]
            return ReadFile(path=remaining[0])
        completion = self._complete(
            SINGLE_SHOT_SYSTEM, [Turn(role="user", text=self._prompt())], ()
        )
        code = extract_code(completion.text)
        body = indent_body(code, self.info["task"]["indent"]) if code is not None else ""
        return Submit(body=body)

    def _prompt(self) -> str:
        task = self.info["task"]
        target = task["file"]
        parts = []
        if self.with_paper:
            parts.append(f"# The paper\nPaper ({task['paper_file']}):\n{task['paper_text']}")
        for path in self.files[1:]:
            parts.append(f"# Context file {path}\n{_strip_numbers(self.contents[path])}")
        parts.append(f"# The file to complete: {target}\n{_strip_numbers(self.contents[target])}")
        lines = task["placeholder"].strip().splitlines()
        rest = {1: "", 2: " (and the line after it)"}.get(
            len(lines), f" (and the {len(lines) - 1} lines after it)"
        )
        parts.append(f"Write the code that replaces `{lines[0].strip()}`{rest}.")
        return "\n\n".join(parts)

    def end(self, info: dict[str, Any]) -> None:
        pass


def _strip_numbers(read_file_output: str) -> str:
    """read_file's observation without its header and line-number column."""
    lines = read_file_output.splitlines()[1:]
    return "\n".join(line.split("\t", 1)[1] if "\t" in line else line for line in lines)
