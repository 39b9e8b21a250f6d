"""The two reference points of every table: the oracle (100%) and the null agent (0%)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rcb_env.tools.actions import Action, ReplaceInFile, Submit, ToolSpec, WriteFile


class NullAgent:
    """Submits the untouched workspace."""

    name = "null"

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        return Submit()

    def end(self, info: dict[str, Any]) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class OracleAgent:
    """Writes the reference body where the TODO block stands, then submits.

    The answers (snippet id -> reference body) come from whoever builds the agent: the runner
    reads them from the task set. The environment never hands them out.
    """

    name = "oracle"

    def __init__(self, answers: Mapping[str, str], files: Mapping[str, str] | None = None) -> None:
        self.answers = answers
        self.files = files or {}
        """Snippet id -> the whole goal file with the answer in place, for layouts whose
        placeholder cannot be replaced by text (empty, or not unique in the file)."""
        self._pending: list[Action] = []

    def start(self, observation: str, info: dict[str, Any], tools: Sequence[ToolSpec]) -> None:
        sid = info["snippet_id"]
        edit: Action
        if sid in self.files:
            edit = WriteFile(path=info["file"], content=self.files[sid])
        else:
            edit = ReplaceInFile(path=info["file"], old=info["todo_block"], new=self.answers[sid])
        self._pending = [edit, Submit()]

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        return self._pending.pop(0) if self._pending else Submit()

    def end(self, info: dict[str, Any]) -> None:
        self._pending = []

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}
