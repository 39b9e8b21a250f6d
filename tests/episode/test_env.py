"""The Gymnasium environment: contract, tools as observations, grading isolation, budgets."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import rcb_env
from rcb_env import Budgets, EnvConfig, GradingConfig, RcbEnv, SandboxConfig, SandboxFactory
from rcb_env.task import Paper, Snippet, load
from tests.conftest import math_files, write_paper, write_pset

PAPER_TEX = r"""\section{Background}
Means are averages.
\subsection{Notation}
We write $\bar x$.
\section{Method}
The variance is the mean squared deviation from the mean.
"""


@pytest.fixture
def paper(tmp_path: Path) -> Paper:
    files = math_files() | {"paper2code_paper.tex": PAPER_TEX, "notes.md": "helper notes\n"}
    write_pset(tmp_path / "pset", [write_paper(tmp_path / "pset", "maths", files)])
    return load(tmp_path / "pset").papers[0]


@pytest.fixture
def factory(bwrap_config: SandboxConfig) -> Iterator[SandboxFactory]:
    f = SandboxFactory(bwrap_config)
    yield f
    f.close()


def _env(
    paper: Paper,
    factory: SandboxFactory,
    grading: GradingConfig,
    name: str = "variance",
    **cfg: Any,
) -> RcbEnv:
    return RcbEnv(
        paper, paper.snippet(name), EnvConfig(**cfg), grading_config=grading, factory=factory
    )


def _solve(snippet: Snippet) -> dict[str, Any]:
    return {
        "tool": "replace_in_file",
        "path": snippet.file,
        "old": snippet.todo_body(),
        "new": snippet.reference_body,
    }


def test_bundled_ids_are_registered_and_pass_check_env(require_bwrap: None) -> None:
    ids = [i for i in gym.registry if i.startswith("rcb/")]
    assert len(ids) == len(load(rcb_env.bundled_root()).snippets)
    assert "rcb/adamw-warmup.bias_correction-v0" in ids
    env = gym.make("rcb/adamw-warmup.bias_correction-v0")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any checker warning fails the test
            check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_submit_grades_and_terminates_with_weighted_reward(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    env = _env(paper, factory, task_grading)
    try:
        obs, info = env.reset(seed=0)
        s = paper.snippet("variance")
        assert 'TODO: Implement block "variance"' in obs
        assert "Approximately 2 line(s)" in obs
        assert "stats_ref.py" not in obs
        assert "paper2code_test.py" not in obs
        assert info["weight"] == s.weight
        obs, reward, terminated, truncated, info = env.step(_solve(s))
        assert (reward, terminated, truncated) == (0.0, False, False)
        obs, reward, terminated, truncated, info = env.step({"tool": "submit"})
        assert (reward, terminated, truncated) == (float(s.weight), True, False)
        assert info["grade"]["outcome"] == "passed"
        assert info["patch"].startswith("--- a/stats.py")
        assert info["outside_edits"] is False
        with pytest.raises(gym.error.ResetNeeded, match="ended"):
            env.step({"tool": "list_files"})
    finally:
        env.close()


def test_binary_reward_and_null_submission(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    env = _env(paper, factory, task_grading, name="mean", reward="binary")
    try:
        env.reset()
        _, reward, terminated, _, info = env.step({"tool": "submit"})
        assert (reward, terminated, info["passed"]) == (0.0, True, False)
        env.reset()
        env.step(_solve(paper.snippet("mean")))
        _, reward, _, _, _ = env.step({"tool": "submit"})
        assert reward == 1.0
    finally:
        env.close()


def test_actions_as_typed_dict_or_json_are_equivalent(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    env = _env(paper, factory, task_grading)
    try:
        env.reset()
        a = env.step(rcb_env.ReadFile(path="stats.py", start_line=1, end_line=3))[0]
        b = env.step({"tool": "read_file", "path": "stats.py", "start_line": 1, "end_line": 3})[0]
        c = env.step(
            json.dumps({"tool": "read_file", "path": "stats.py", "start_line": 1, "end_line": 3})
        )[0]
        assert a == b == c
        assert a.splitlines()[1] == '1\t"""Tiny maths library."""'
    finally:
        env.close()


@pytest.mark.parametrize(
    ("action", "words"),
    [
        ("{not json", "not valid JSON"),
        ({"tool": "fly"}, "unknown tool"),
        ({"tool": "read_file"}, "path: Field required"),
        ({"tool": "read_file", "path": "../stats_ref.py"}, "outside the workspace"),
        ({"tool": "read_file", "path": "/etc/passwd"}, "outside the workspace"),
        ({"tool": "read_file", "path": "nope.py"}, "no such file"),
        ({"tool": "replace_in_file", "path": "stats.py", "old": "xs", "new": "ys"}, "found"),
        ({"tool": "replace_in_file", "path": "stats.py", "old": "zzz", "new": "y"}, "not found"),
        ({"tool": "search", "pattern": "("}, "invalid regular expression"),
        ({"tool": "read_paper", "section": "Nonexistent"}, "no section matches"),
        ({"tool": "run_command", "command": "sleep 30", "timeout_s": 0.5}, "killed after 0.5 s"),
        ({"tool": "read_file", "path": "x" * 2_000_000}, "limit"),
    ],
)
def test_agent_mistakes_come_back_as_observations(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig, action: Any, words: str
) -> None:
    env = _env(paper, factory, task_grading)
    try:
        env.reset()
        obs, reward, terminated, truncated, _ = env.step(action)
        assert words in obs
        assert (reward, terminated, truncated) == (0.0, False, False)
    finally:
        env.close()


def test_tools_read_search_write_paper(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    env = _env(paper, factory, task_grading, paper_in_prompt="outline")
    try:
        obs, _ = env.reset()
        assert "- Background" in obs
        assert "Means are averages" not in obs  # outline only
        assert env.step({"tool": "list_files"})[0].split() == [
            "notes.md",
            "paper2code_paper.tex",
            "stats.py",
        ]
        assert (
            "stats.py:4: def mean(xs):"
            in env.step({"tool": "search", "pattern": r"def mean", "glob": "*.py"})[0]
        )
        section = env.step({"tool": "read_paper", "section": "method"})[0]
        assert section.startswith(r"\section{Method}")
        assert "Notation" not in section
        sub = env.step({"tool": "read_paper", "section": "Background"})[0]
        assert "Notation" in sub
        assert "Method" not in sub
        assert "  - Notation" in env.step({"tool": "read_paper", "section": "outline"})[0]
        env.step({"tool": "write_file", "path": "scratch/new.py", "content": "print(6 * 7)\n"})
        out = env.step({"tool": "run_command", "command": "python scratch/new.py"})[0]
        assert out.splitlines()[0] == "42"
        assert "[exit code 0]" in out
    finally:
        env.close()


def test_run_tests_feedback_levels(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    for level, expect, forbid in (
        ("summary", "TestStats.test_variance: failed", "Traceback"),
        ("full", "Traceback", None),
        ("none", "no test feedback", "test_variance"),
    ):
        env = _env(paper, factory, task_grading, test_feedback=level)
        try:
            env.reset()
            env.step(
                {
                    "tool": "replace_in_file",
                    "path": "stats.py",
                    "old": paper.snippet("variance").todo_body(),
                    "new": "    return 0.5\n",
                }
            )
            obs = env.step({"tool": "run_tests"})[0]
            assert expect in obs, (level, obs)
            if forbid:
                assert forbid not in obs, (level, obs)
        finally:
            env.close()


def test_edits_outside_the_block_do_not_change_the_grade(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    s = paper.snippet("variance")
    env = _env(paper, factory, task_grading)
    try:
        env.reset()
        env.step(_solve(s))
        # Sabotage elsewhere: break mean() in the same file and add a file that would shadow it.
        env.step(
            {
                "tool": "replace_in_file",
                "path": "stats.py",
                "old": "    return total / len(xs)\n",
                "new": "    return -1\n",
            }
        )
        env.step(
            {
                "tool": "write_file",
                "path": "stats_ref.py",
                "content": "def variance(xs): return 0\n",
            }
        )
        _, reward, terminated, _, info = env.step({"tool": "submit"})
        assert info["outside_edits"] is True
        assert "stats_ref.py" in info["changed_files"]
        assert (reward, terminated) == (float(s.weight), True)
    finally:
        env.close()


def test_submit_with_explicit_body(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    s = paper.snippet("variance")
    env = _env(paper, factory, task_grading)
    try:
        env.reset()
        _, reward, _, _, _ = env.step({"tool": "submit", "body": s.reference_body})
        assert reward == float(s.weight)
    finally:
        env.close()


def test_golden_trajectory_is_reproducible(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    s = paper.snippet("variance")
    script: list[Any] = [
        {"tool": "list_files"},
        {"tool": "read_file", "path": "stats.py"},
        {"tool": "search", "pattern": "TODO"},
        {"tool": "run_command", "command": "python -c 'print(1+1)'; ls"},
        {"tool": "run_tests"},
        _solve(s),
        {"tool": "run_tests"},
        {"tool": "read_paper", "section": "Method"},
        {"tool": "submit"},
    ]

    def play() -> list[tuple[str, float, bool, bool]]:
        env = _env(paper, factory, task_grading)
        try:
            obs, _ = env.reset(seed=123)
            out = [(obs, 0.0, False, False)]
            for action in script:
                o, r, term, trunc, _ = env.step(action)
                out.append((o, r, term, trunc))
            return out
        finally:
            env.close()

    first, second = play(), play()
    assert first == second
    assert first[-1][1:] == (float(s.weight), True, False)
    assert "tests FAILED" in first[5][0]
    assert "tests PASSED" in first[7][0]


def test_step_budget_truncates_at_exactly_the_limit_and_grades(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    s = paper.snippet("variance")
    env = Budgets(_env(paper, factory, task_grading), max_steps=3)
    try:
        _, info = env.reset()
        assert info["budgets"]["steps"] == 3
        assert env.step({"tool": "list_files"})[2:4] == (False, False)
        env.step(_solve(s))
        obs, reward, terminated, truncated, info = env.step({"tool": "list_files"})
        assert (terminated, truncated) == (False, True)
        assert reward == float(s.weight)  # graded what the workspace held
        assert info["reason"] == "budget_steps"
        assert "budget exhausted: steps" in obs
    finally:
        env.close()


def test_token_and_wall_budgets(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    env = Budgets(_env(paper, factory, task_grading), max_tokens=100)
    try:
        env.reset()
        env.charge_tokens(60)
        assert env.step({"tool": "list_files"})[3] is False
        env.charge_tokens(40)
        _, reward, _, truncated, info = env.step({"tool": "list_files"})
        assert truncated
        assert info["reason"] == "budget_tokens"
        assert reward == 0.0
    finally:
        env.close()
    env = Budgets(_env(paper, factory, task_grading), max_wall_s=0.0)
    try:
        env.reset()
        assert env.step({"tool": "list_files"})[4]["reason"] == "budget_wall_s"
    finally:
        env.close()


def test_a_broken_sandbox_ends_the_episode_as_infrastructure(
    paper: Paper, factory: SandboxFactory, task_grading: GradingConfig
) -> None:
    env = _env(paper, factory, task_grading)
    try:
        env.reset()
        assert env.sandbox is not None
        env.sandbox.close()
        _obs, reward, terminated, truncated, info = env.step(
            {"tool": "run_command", "command": "ls"}
        )
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["infra_error"]["stage"] == "sandbox"
    finally:
        env.close()


def test_a_full_disk_ends_the_episode_as_infrastructure(
    paper: Paper, bwrap_config: SandboxConfig, task_grading: GradingConfig
) -> None:
    import os
    import subprocess
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    # On tmpfs (world-searchable) so the sandbox user can reach it without loosening anything.
    small = Path(tempfile.mkdtemp(prefix="rcbtest-small-", dir="/dev/shm"))
    os.chmod(small, 0o1777)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=1777", "tmpfs", str(small)], check=True
    )
    try:
        f = SandboxFactory(bwrap_config, scratch=small)
        env = RcbEnv(paper, paper.snippet("variance"), grading_config=task_grading, factory=f)
        try:
            env.reset()
            truncated = False
            for i in range(5):  # 900 kB a write (under the action size limit) into 2 MB
                _, reward, terminated, truncated, info = env.step(
                    {"tool": "write_file", "path": f"big{i}.bin", "content": "x" * 900_000}
                )
                if truncated:
                    break
            assert (reward, terminated, truncated) == (0.0, False, True)
            assert info["infra_error"]["stage"] == "sandbox"
            assert "No space left" in info["infra_error"]["message"]
        finally:
            env.close()
            f.close()
    finally:
        subprocess.run(["umount", str(small)], check=True)
        small.rmdir()
