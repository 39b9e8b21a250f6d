"""The one chat-tools loop (:class:`rcb_env.tools.chat.ChatToolsLoop`) behind both tool-calling
agents: the built-in tools agent (sync, a ``ChatModel`` through the real openai SDK) and an RL
rollout's policy agent (async, ``OpenAIPolicy`` through the real openai SDK), each against our
scripted server, on the in-package fake sandbox with real grading. The same scripted
conversation sends the same messages from both, pinned here turn by turn."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from rcb_agents.llm import ToolsAgent
from rcb_agents.models import ModelConfig, RetryPolicy, make_model
from rcb_agents.testing import Reply, ScriptedModelServer

from rcb_env.agent import NUDGE, tools_system_prompt
from rcb_env.episode.driver import Episode
from rcb_env.episode.env import EnvConfig
from rcb_env.grading import GradingConfig
from rcb_env.rl import RolloutConfig, rollout
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.sandbox.backend import register_backend
from rcb_env.task import Paper, Snippet, load
from rcb_env.task.source import source_for
from rcb_env.testing import FakeBackend
from rcb_env.tools.chat import ChatToolsLoop, ReplyKind
from tests.conftest import math_files, write_paper, write_pset

register_backend(FakeBackend)

ENV = EnvConfig(paper_in_prompt="outline")


@pytest.fixture
def maths(tmp_path: Path) -> tuple[Paper, Snippet]:
    root = write_pset(tmp_path / "pset", [write_paper(tmp_path / "pset", "maths", math_files())])
    paper = load(root).papers[0]
    return paper, paper.snippet("variance")


def _grading() -> GradingConfig:
    return GradingConfig(python=Path(sys.executable), timeout_s=30)


def _script() -> list[Reply]:
    """Two calls in one turn, a turn without a call (the nudge), a malformed call, a submit."""
    return [
        Reply(tool_calls=(("list_files", {}), ("read_file", {"path": "stats.py", "end_line": 2}))),
        Reply(text="Let me think."),
        Reply(tool_calls=(("read_file", '{"path": '),)),
        Reply(text="Done.", tool_calls=(("submit", {}),)),
    ]


def _normal(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as sent, with the server's random call ids numbered in order of appearance
    and an absent ``content`` read as None (the chat API's two spellings of one thing)."""
    ids: dict[str, str] = {}

    def num(call_id: str) -> str:
        return ids.setdefault(call_id, f"call-{len(ids)}")

    out = []
    for sent in messages:
        m = {"content": None, **sent}
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": num(c["id"])} for c in m["tool_calls"]]
        if "tool_call_id" in m:
            m["tool_call_id"] = num(m["tool_call_id"])
        out.append(m)
    return out


def _tools_agent(paper: Paper, snippet: Snippet) -> list[list[dict[str, Any]]]:
    with ScriptedModelServer(_script()) as server:
        model = make_model(
            ModelConfig(
                spec="openai:gpt-4.1",
                base_url=server.openai_url,
                retry=RetryPolicy(attempts=1, scale=0),
            )
        )
        factory = SandboxFactory(SandboxConfig(backend="fake"))
        episode = Episode(paper, snippet, factory=factory, env=ENV, grading=_grading())
        try:
            outcome = episode.run(ToolsAgent(model))
        finally:
            episode.close()
            factory.close()
        assert outcome.reason == "submit"
        return [body["messages"] for _path, body in server.requests]


def _policy_agent(paper: Paper, snippet: Snippet) -> list[list[dict[str, Any]]]:
    with ScriptedModelServer(_script(), tokens=None) as server:
        from rcb_agents.policy import OpenAIPolicy  # openai: imported where used

        policy = OpenAIPolicy("scripted", base_url=server.openai_url)
        factory = SandboxFactory(SandboxConfig(backend="fake"))
        cfg = RolloutConfig(env=ENV, grading=_grading())
        try:
            t = asyncio.run(rollout(paper, snippet, policy, config=cfg, factory=factory))
        finally:
            factory.close()
        assert t.stop_reason == "submit"
        return [body["messages"] for _path, body in server.requests]


def _expected(paper: Paper, snippet: Snippet, first: str) -> list[dict[str, Any]]:
    """The conversation the script makes, as the model receives it at its last call."""
    statement = source_for(paper).statement(paper, snippet).model_dump(mode="json")

    def calls(*named: tuple[int, str, str]) -> list[dict[str, Any]]:
        return [
            {"id": f"call-{n}", "type": "function", "function": {"name": f, "arguments": a}}
            for n, f, a in named
        ]

    return [
        {"content": tools_system_prompt(statement), "role": "system"},
        {"content": first, "role": "user"},
        {
            "content": None,
            "role": "assistant",
            "tool_calls": calls(
                (0, "list_files", "{}"),
                (1, "read_file", json.dumps({"path": "stats.py", "end_line": 2})),
            ),
        },
        {"content": "<list_files>", "role": "tool", "tool_call_id": "call-0"},
        {"content": "<read_file>", "role": "tool", "tool_call_id": "call-1"},
        {"content": "Let me think.", "role": "assistant"},
        {"content": NUDGE, "role": "user"},
        {
            "content": None,
            "role": "assistant",
            "tool_calls": calls((2, "read_file", '{"path": ')),
        },
        {"content": "<error>", "role": "tool", "tool_call_id": "call-2"},
    ]


def _blind(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool observations replaced by what they are (their text is the environment's)."""
    out = []
    for m in messages:
        text = m["content"]
        if m["role"] == "tool":
            kind = "<error>" if "not valid JSON" in text else None
            kind = kind or ("<read_file>" if "stats.py" in text and "1\t" in text else None)
            text = kind or ("<list_files>" if "paper2code_paper.tex" in text else text)
        out.append({**m, "content": text})
    return out


def test_both_agents_send_the_loops_message_sequence(maths: tuple[Paper, Snippet]) -> None:
    paper, snippet = maths
    tools = [_normal(m) for m in _tools_agent(paper, snippet)]
    policy = [_normal(m) for m in _policy_agent(paper, snippet)]
    assert len(tools) == len(policy) == 4  # one request per scripted reply
    assert tools == policy  # the same messages, call for call
    last = tools[-1]
    assert _blind(last) == _expected(paper, snippet, last[1]["content"])
    for n, request in enumerate(tools[:-1]):  # each request extends the one before
        assert last[: len(request)] == request, n


def _call(n: int, name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_the_loop_turns_replies_into_actions_and_observations_into_tool_messages() -> None:
    loop = ChatToolsLoop({"file": "a.py"}, "the task", max_nudges=1)
    assert [m["role"] for m in loop.messages] == ["system", "user"]
    assert "removed from a.py" in loop.system
    assert loop.wants_reply
    calls = [_call(0, "read_file", '{"path": "a.py"}'), _call(1, "search", "[1]")]
    assert (
        loop.reply({"role": "assistant", "content": None, "tool_calls": calls}) is ReplyKind.CALLS
    )
    assert loop.messages[-1] == {"role": "assistant", "tool_calls": calls}  # None dropped
    first = loop.next_call()
    assert first.action == {"path": "a.py", "tool": "read_file"}
    assert not loop.wants_reply  # the second call of the turn is still queued
    assert loop.observe("1\tx = 1") is first
    assert loop.messages[-1] == {"role": "tool", "tool_call_id": "c0", "content": "1\tx = 1"}
    assert loop.next_call().action == "[1]"  # not an object: the raw text, for the env to refuse
    loop.observe("error")
    assert loop.wants_reply
    assert loop.reply({"content": "hmm"}) is ReplyKind.NUDGED
    assert loop.messages[-2:] == [{"content": "hmm", "role": "assistant"}, NUDGED_MESSAGE]
    assert loop.reply({"content": "still"}) is ReplyKind.SILENT  # max_nudges=1: no second nudge
    assert loop.messages[-1]["role"] == "assistant"
    assert loop.observe("nothing pending") is None
    assert ChatToolsLoop(None, "t").reply({"content": "..."}, cut_off=True) is ReplyKind.CUT_OFF


NUDGED_MESSAGE = {"role": "user", "content": NUDGE}


def test_one_chat_tools_loop() -> None:
    """The nudge is added by the loop alone: no other module of rcb_env or rcb_agents uses it
    (the agents wrap the loop instead of writing a conversation of their own)."""
    import rcb_agents

    import rcb_env

    env = Path(rcb_env.__file__).parent
    allowed = {env / "tools" / "chat.py", env / "agent.py"}  # defined; re-exported
    roots = [env, Path(rcb_agents.__file__).parent]
    users = [p for r in roots for p in r.rglob("*.py") if "NUDGE" in p.read_text()]
    assert set(users) == allowed
