"""A scripted model that plays each agent CLI's own tools for a whole set at once: the first
call of an episode is answered with the CLI's own edit tool writing the snippet's file with the
reference body (``oracle``) or a wrong one (``wrong``) in the masked block, the next one ends
the episode. Which snippet an episode is, is read from its task statement in the request, so
any number of episodes can run at once against one server.

Each CLI's own tool, by the wire format it speaks:

- Anthropic Messages (Claude Code): ``Write {file_path, content}``, then a text answer;
- OpenAI Responses (Codex): ``exec_command`` running ``apply_patch`` with an ``Update File``
  patch (Codex intercepts it and applies it itself), then a text answer;
- chat completions (mini-swe-agent): ``bash`` writing the file, then its submit command;
- chat completions with rcb-env's own tools (the ``tools`` agent, told apart by the ``submit``
  tool in its request): ``write_file``, then ``submit``: so the tools agent plays the same
  episodes as the CLIs, for ``rcb-env compare`` beside them.

``python -m rcb_agents.testing.cli_oracle --pset NAME --mode oracle|wrong`` serves it on
127.0.0.1 (``rcb-env eval --agent claude-code --base-url URL``; the acceptance run, ``make
acceptance-agent-clis``) and prints its URL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rcb_agents.testing.server import Fault, Reply, ScriptedModelServer
from rcb_env.task.models import Paper, Pset, Snippet
from rcb_env.task.source import source_for

Mode = Literal["oracle", "wrong"]

#: The agent's own shell looks for the key (``{key}``: a pattern that matches it but is not it,
#: so that the search's own command line, which ``/proc`` shows while it runs, does not match)
#: in its environment, every process's environment and command line, and every file of /tmp
#: and its home: ``rcb_key_hits=N``.
SPY = (
    "echo rcb_key_hits=$(( $(env | grep -c '{key}') + $(cat /proc/[0-9]*/environ "
    "/proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c '{key}') + "
    "$(grep -rl '{key}' /tmp $HOME 2>/dev/null | wc -l) ))"
)


def key_pattern(key: str) -> str:
    """A grep pattern for ``key`` that does not match itself (its last character in a bracket
    expression)."""
    return f"{key[:-1]}[{key[-1]}]"


#: mini-swe-agent's own way of saying it is done.
MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def wrong_body(snippet: Snippet) -> str:
    """A body that fails any test that reaches it."""
    return f"{snippet.indent}raise NotImplementedError('rcb-env: a wrong body')\n"


def apply_patch(path: str, old: str, new: str) -> str:
    """Codex's own patch format: the whole file's lines replaced."""
    lines = ["*** Begin Patch", f"*** Update File: {path}", "@@"]
    lines += [f"-{line}" for line in old.splitlines()]
    lines += [f"+{line}" for line in new.splitlines()]
    lines.append("*** End Patch")
    return "\n".join(lines)


def _heredoc(path: str, text: str) -> str:
    mark = "RCB_EOF"
    while mark in text:
        mark += "_"
    end = "" if text.endswith("\n") else "\n"
    return f"cat > '{path}' <<'{mark}'\n{text}{end}{mark}"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def turn(wire: str, body: dict[str, Any]) -> int:
    """How many tool results the conversation holds (0: the episode's first call)."""
    if wire == "messages":
        return sum(
            isinstance(block, dict) and block.get("type") == "tool_result"
            for m in body.get("messages") or []
            if isinstance(m.get("content"), list)
            for block in m["content"]
        )
    if wire == "responses":
        items = body.get("input")
        return (
            sum(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)
            if isinstance(items, list)
            else 0
        )
    return sum(m.get("role") == "tool" for m in body.get("messages") or [])


def wire_of(path: str, body: dict[str, Any] | None = None) -> str:
    """The request's wire format; ``tools`` for a chat request offering rcb-env's own tools."""
    p = path.partition("?")[0].rstrip("/")
    if p.endswith("/messages"):
        return "messages"
    if p.endswith("/responses"):
        return "responses"
    names = {
        (t.get("function") or {}).get("name")
        for t in (body or {}).get("tools") or []
        if isinstance(t, dict)
    }
    return "tools" if "submit" in names else "chat"


@dataclass(frozen=True)
class Act:
    """One answer of a scripted episode, in whichever CLI's own tools: write the snippet's file
    with the reference body (``oracle``) or a wrong one (``wrong``), run a ``shell`` command,
    or ``end`` the episode (a text answer; mini-swe-agent's submit command)."""

    kind: Literal["oracle", "wrong", "shell", "end"]
    command: str = ""
    input_tokens: int = 100
    output_tokens: int = 20


Play = Sequence[Act | Reply | Fault]


class CliOracle:
    """The responder (:attr:`ScriptedModelServer.responder`) for every snippet of ``pset``:
    each episode's call ``n`` answered with the ``n``-th item of its play (``plays`` by
    snippet id; default: the edit of ``mode``, then the end; past its play, the end)."""

    def __init__(
        self,
        pset: Pset,
        mode: Mode = "oracle",
        plays: Mapping[str, Play] = {},
        *,
        spy_key: str | None = None,
    ) -> None:
        """``spy_key``: every episode's default play also runs :data:`SPY` with the CLI's
        own shell after its edit: the key's occurrences it finds inside the sandbox are
        counted in :attr:`leaks` (the acceptance run's check that the key never enters)."""
        self.mode = mode
        self.plays = dict(plays)
        self.spy = None if spy_key is None else SPY.format(key=key_pattern(spy_key))
        self.spied = 0
        """Spy reports read."""
        self.leaks = 0
        """Occurrences of the key the spies found."""
        self.snippets: list[tuple[str, Paper, Snippet]] = []
        for paper in pset.papers:
            for snippet in paper.snippets:
                st = source_for(paper).statement(paper, snippet)
                needle = f"In {st.file}, {st.placeholder_intro}:\n\n{st.placeholder.rstrip()}"
                self.snippets.append((f'"{st.title}".\n\n{needle}', paper, snippet))
        self.answered = 0
        """Episodes answered with an edit."""
        self.unknown = 0
        """Requests whose statement matched no snippet."""
        self._lock = threading.Lock()

    def _read_spy(self, text: str) -> None:
        hits = re.findall(r"rcb_key_hits=(\d+)", text)
        with self._lock:
            self.spied += bool(hits)
            self.leaks += sum(int(h) for h in hits)

    def find(self, text: str) -> tuple[Paper, Snippet] | None:
        for needle, paper, snippet in self.snippets:
            if needle in text:
                return paper, snippet
        return None

    def __call__(self, path: str, body: dict[str, Any]) -> Reply | Fault | None:
        wire = wire_of(path, body)
        found = self.find("\n".join(_strings(body.get("messages") or body.get("input") or [])))
        if found is None:
            with self._lock:
                self.unknown += 1
            return Fault(status=400, message="scripted model: no snippet in this request")
        paper, snippet = found
        default: Play = (Act(self.mode), Act("end"))
        if self.spy is not None:
            default = (Act(self.mode), Act("shell", self.spy), Act("end"))
        play = self.plays.get(snippet.id, default)
        n = turn(wire, body)
        if self.spy is not None and n == 2 and snippet.id not in self.plays:
            self._read_spy(json.dumps(body))
        item = play[n] if n < len(play) else Act("end")
        if not isinstance(item, Act):
            return item
        if item.kind in ("oracle", "wrong"):
            with self._lock:
                self.answered += 1
        return act(item, wire, paper, snippet)


def act(item: Act, wire: str, paper: Paper, snippet: Snippet) -> Reply:
    """``item`` as a reply in ``wire``'s CLI's own tools."""
    usage = {"input_tokens": item.input_tokens, "output_tokens": item.output_tokens}
    if item.kind == "end":
        if wire == "tools":
            return Reply(tool_calls=(("submit", {}),), **usage)
        if wire == "chat":
            return Reply(tool_calls=(("bash", {"command": MINI_SUBMIT}),), **usage)
        return Reply(text="Done: the block is implemented.", **usage)
    if item.kind == "shell":
        name, key = {
            "messages": ("Bash", "command"),
            "responses": ("exec_command", "cmd"),
            "tools": ("run_command", "command"),
        }.get(wire, ("bash", "command"))
        return Reply(tool_calls=((name, {key: item.command}),), **usage)
    body_text = snippet.reference_body if item.kind == "oracle" else wrong_body(snippet)
    solved = source_for(paper).solved_file(paper, snippet, body_text)
    if wire == "messages":
        call: tuple[str, dict[str, Any]] = ("Write", {"file_path": snippet.file, "content": solved})
    elif wire == "tools":
        call = ("write_file", {"path": snippet.file, "content": solved})
    elif wire == "responses":
        patch = apply_patch(snippet.file, snippet.masked_text, solved)
        call = ("exec_command", {"cmd": f"apply_patch <<'RCB_PATCH'\n{patch}\nRCB_PATCH"})
    else:
        call = ("bash", {"command": _heredoc(snippet.file, solved)})
    return Reply(tool_calls=(call,), **usage)


def main(argv: list[str] | None = None) -> None:
    from rcb_env.task import bundled_root, load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pset", default=None, help="a set's name or folder (default: bundled)")
    parser.add_argument("--mode", choices=("oracle", "wrong"), default="oracle")
    parser.add_argument("--api-key", default=None, help="the key the server demands")
    parser.add_argument(
        "--spy", action="store_true", help="each episode also looks for the key inside"
    )
    parser.add_argument("--report", default=None, help="write the counts here (JSON) at exit")
    args = parser.parse_args(argv)
    spy_key = args.api_key if args.spy else None
    oracle = CliOracle(load(args.pset or bundled_root()), args.mode, spy_key=spy_key)
    with ScriptedModelServer(api_key=args.api_key, responder=oracle) as server:
        print(json.dumps({"url": server.url, "snippets": len(oracle.snippets)}), flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
        report = {"answered": oracle.answered, "unknown": oracle.unknown,
                  "requests": len(server.requests), "refused": server.refused,
                  "spied": oracle.spied, "key_found_inside": oracle.leaks}  # fmt: skip
        print(json.dumps(report), file=sys.stderr)
        if args.report:
            Path(args.report).write_text(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
