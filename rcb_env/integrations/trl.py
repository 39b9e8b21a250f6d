"""rcb-env for TRL's ``GRPOTrainer(environment_factory=...)``.

TRL's contract (experimental in TRL): the factory returns one environment per rollout; its
``reset(**row)`` starts the task named by the dataset row and returns the text appended to the
prompt; its public methods are the tools (type-hinted, with Google-style docstrings, rendered to
JSON schemas by ``transformers.utils.get_json_schema``); ``get_reward()`` scores the rollout
from the environment's state. The reward is the environment's (line weight on a pass, 0 on a
fail) and ``None`` when the episode could not be scored (an infrastructure failure), which TRL
leaves out of the reward instead of counting a 0.

    from rcb_env.integrations.trl import environment_factory, dataset_rows
    trainer = GRPOTrainer(model=..., train_dataset=Dataset.from_list(dataset_rows()),
                          environment_factory=environment_factory(), ...)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from rcb_env.episode.driver import BudgetConfig
from rcb_env.episode.env import EnvConfig
from rcb_env.grading.grader import GradingConfig
from rcb_env.integrations._session import Session, load_tasks
from rcb_env.sandbox import SandboxConfig


class RcbEnvironment:
    """One rcb-env episode per rollout; the episode's tools as methods."""

    def __init__(
        self,
        pset: str | None = None,
        *,
        sandbox: SandboxConfig | None = None,
        grading: GradingConfig | None = None,
        env: EnvConfig | None = None,
        budgets: BudgetConfig | None = None,
        max_turns: int = 30,
    ) -> None:
        """``env``: the episode's settings (``paper_in_prompt="outline"`` keeps the first
        observation short; ``test_feedback``; observation caps); ``budgets``: wall-time, token
        and cost limits beside ``max_turns`` tool calls."""
        self._session = Session(
            pset, sandbox=sandbox, grading=grading, env=env, budgets=budgets, max_turns=max_turns
        )

    # reserved -----------------------------------------------------------------------------
    def reset(self, **row: Any) -> str:
        """Start the task of a dataset row (its ``task_id`` column)."""
        return self._session.start(str(row["task_id"]))

    def get_reward(self) -> float | None:
        """The episode's reward (graded as it stands if never submitted); None if unscored."""
        return self._session.reward()

    # tools ----------------------------------------------------------------------------------
    def list_files(self, path: str = ".") -> str:
        """List the files under a folder of the repository.

        Args:
            path: Folder relative to the repository root.

        Returns:
            One file path per line.
        """
        return self._session.call("list_files", {"path": path})

    def read_file(self, path: str, start_line: int = 0, end_line: int = 0) -> str:
        """Read a file of the repository, optionally only some of its lines.

        Args:
            path: File relative to the repository root.
            start_line: First line to show (1-based; 0 for the start).
            end_line: Last line to show (0 for the end).

        Returns:
            The file's text with line numbers.
        """
        args: dict[str, Any] = {"path": path}
        if start_line > 0:
            args["start_line"] = start_line
        if end_line > 0:
            args["end_line"] = end_line
        return self._session.call("read_file", args)

    def search(self, pattern: str, path: str = ".") -> str:
        """Search the repository's files for a regular expression.

        Args:
            pattern: The regular expression.
            path: Folder or file to search, relative to the repository root.

        Returns:
            Matching lines as path:line:text.
        """
        return self._session.call("search", {"pattern": pattern, "path": path})

    def replace_in_file(self, path: str, old: str, new: str) -> str:
        """Replace an exact piece of text of a file (it must occur exactly once).

        Args:
            path: File relative to the repository root.
            old: The exact text to replace.
            new: The text to put in its place.

        Returns:
            What was replaced, or why nothing was.
        """
        return self._session.call("replace_in_file", {"path": path, "old": old, "new": new})

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file.

        Args:
            path: File relative to the repository root.
            content: The file's new text.

        Returns:
            A confirmation.
        """
        return self._session.call("write_file", {"path": path, "content": content})

    def run_command(self, command: str) -> str:
        """Run a shell command in the repository's sandbox (no network).

        Args:
            command: The command line.

        Returns:
            Its exit status and output.
        """
        return self._session.call("run_command", {"command": command})

    def run_tests(self) -> str:
        """Run the task's tests on the code as it stands now.

        Returns:
            Whether the tests passed, with feedback.
        """
        return self._session.call("run_tests", {})

    def read_paper(self, section: str = "") -> str:
        """Read the paper, or one of its sections.

        Args:
            section: A section's title; empty for the outline.

        Returns:
            The section's text, or the paper's outline.
        """
        return self._session.call("read_paper", {"section": section} if section else {})

    def submit(self) -> str:
        """Submit the code as it stands: it is graded and the episode ends.

        Returns:
            The grading's verdict.
        """
        return self._session.call("submit", {})

    def _close(self) -> None:
        """Release the episode's sandboxes (private: TRL exposes every public method as a
        tool)."""
        self._session.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to release
            self._session.close()


def environment_factory(
    pset: str | None = None,
    *,
    sandbox: SandboxConfig | None = None,
    grading: GradingConfig | None = None,
    env: EnvConfig | None = None,
    budgets: BudgetConfig | None = None,
    max_turns: int = 30,
) -> Callable[[], RcbEnvironment]:
    """What ``GRPOTrainer(environment_factory=...)`` takes: a fresh environment per call (the
    episode config, as :class:`RcbEnvironment` takes it)."""

    def make() -> RcbEnvironment:
        return RcbEnvironment(
            pset, sandbox=sandbox, grading=grading, env=env, budgets=budgets, max_turns=max_turns
        )

    return make


def dataset_rows(pset: str | None = None, *, system: str | None = None) -> list[dict[str, Any]]:
    """One training row per snippet: a conversational ``prompt`` and the ``task_id`` that
    ``reset`` starts (the task statement is appended to the prompt by TRL)."""
    from rcb_env.rl.rollout import SYSTEM

    return [
        {
            "prompt": [
                {"role": "system", "content": system or SYSTEM},
                {"role": "user", "content": f"Task {s.id}:\n"},
            ],
            "task_id": s.id,
        }
        for s in load_tasks(pset).snippets
    ]
