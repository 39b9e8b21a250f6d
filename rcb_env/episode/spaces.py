"""Gymnasium spaces for free text observations and typed tool actions."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from rcb_env.tools.actions import Action, ActionError, ListFiles, ReadFile, ReadPaper, parse_action


class TextSpace(spaces.Space[str]):
    """Any Python string up to ``max_length`` characters (Gymnasium's ``Text`` space only admits
    a fixed character set, which code and LaTeX do not fit)."""

    def __init__(self, max_length: int = 10_000_000, seed: int | None = None) -> None:
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(0, 32))
        return "".join(chr(int(c)) for c in self.np_random.integers(32, 127, size=n))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("TextSpace", self.max_length))

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


class ActionSpace(spaces.Space[Any]):
    """Tool actions: typed models, or the equivalent dict or JSON string. ``sample`` draws
    harmless read-only actions (for environment checkers and smoke tests)."""

    def __init__(self, files: tuple[str, ...], seed: int | None = None) -> None:
        self.files = files or (".",)
        super().__init__(shape=None, dtype=None, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> Action:
        choice = int(self.np_random.integers(0, 3))
        if choice == 0:
            return ListFiles()
        if choice == 1:
            path = self.files[int(self.np_random.integers(0, len(self.files)))]
            return ReadFile(path=path, start_line=1, end_line=int(self.np_random.integers(1, 40)))
        return ReadPaper(section="outline")

    def contains(self, x: Any) -> bool:
        try:
            parse_action(x)
        except ActionError:
            return False
        return True

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActionSpace) and other.files == self.files

    def __hash__(self) -> int:
        return hash(("ActionSpace", self.files))
