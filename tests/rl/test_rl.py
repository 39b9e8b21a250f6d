"""RL rollouts: the async API, token fidelity through the real openai SDK against our scripted
server (vLLM's wire format), groups and their failure semantics, export. Real bwrap sandboxes
and real grading; the policies here are fakes we write (a scripted model server, a scripted
policy), never patched library internals."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from rcb_agents.testing import Reply, ScriptedModelServer

from rcb_env import config
from rcb_env.agent import tools_system_prompt
from rcb_env.episode.outcome import StopReason
from rcb_env.errors import SandboxError
from rcb_env.grading import GradingConfig
from rcb_env.rl import PolicyOutput, RolloutConfig, rollout, rollout_group, shared
from rcb_env.rl.trajectory import ModelTurn, token_views
from rcb_env.sandbox import SandboxConfig, register_backend
from rcb_env.task import bundled_root, load
from rcb_env.task.models import Paper, Snippet
from rcb_env.task.source import source_for
from rcb_env.testing import FakeBackend

WRONG = "        pass\n"
CFG = RolloutConfig(grading=GradingConfig(python=config.task_python(), timeout_s=60))


@pytest.fixture(scope="module")
def task() -> tuple[Paper, Snippet]:
    paper = load(bundled_root()).paper("adamw-warmup")
    return paper, paper.snippet("bias correction")


@pytest.fixture(autouse=True)
def _fresh_shared() -> Any:
    """Each test starts as a fresh process would: rollouts without a factory use the process's
    shared factories, so one test's templates and warm processes would be the next one's."""
    shared.close_shared()
    yield
    shared.close_shared()


def _bwrap() -> SandboxConfig:
    return SandboxConfig(backend="bwrap", python=config.task_python())


def _solve(snippet: Snippet) -> list[Reply]:
    return [
        Reply(tool_calls=(("read_file", {"path": snippet.file}),), token_ids=(11, 12, 13)),
        Reply(
            tool_calls=(
                (
                    "replace_in_file",
                    {
                        "path": snippet.file,
                        "old": snippet.todo_body(),
                        "new": snippet.reference_body,
                    },
                ),
            ),
            token_ids=(21, 22, 23, 24),
        ),
        Reply(text="done", tool_calls=(("submit", {}),), token_ids=(31, 32)),
    ]


def test_token_fidelity_and_the_flat_view_when_turns_extend_each_other(
    task: tuple[Paper, Snippet], require_bwrap: None
) -> None:
    paper, snippet = task
    with ScriptedModelServer(_solve(snippet), tokens="append") as server:
        from rcb_agents.policy import OpenAIPolicy  # openai: imported where used

        policy = OpenAIPolicy("scripted", base_url=server.openai_url, weight_version="v7")
        t = asyncio.run(rollout(paper, snippet, policy, config=CFG, sandbox=_bwrap()))
        assert all(
            body.get("return_token_ids") and body["logprobs"] for _p, body in server.requests
        )
    assert (t.status, t.stop_reason, t.reward, t.passed) == ("completed", "submit", 2.0, True)
    assert t.weight == snippet.weight
    assert [s.action["tool"] for s in t.steps] == ["read_file", "replace_in_file", "submit"]
    assert [s.call for s in t.steps] == [0, 1, 2]  # each step -> the call whose answer it was
    for call in t.calls:
        assert call.completion_ids is not None
        assert call.logprobs is not None
        assert len(call.completion_ids) == len(call.logprobs)
        assert call.weight_version == "v7"
    assert [c.completion_ids for c in t.calls] == [(11, 12, 13), (21, 22, 23, 24), (31, 32)]
    assert t.tokens == "full"
    assert t.flat is not None
    assert sum(t.flat.loss_mask) == sum(len(c.completion_ids or ()) for c in t.calls) == 9
    assert len(t.flat.ids) == len(t.flat.loss_mask) == len(t.flat.logprobs)
    last = t.calls[-1]
    assert t.flat.ids == (last.prompt_ids or ()) + (last.completion_ids or ())
    # the messages as sent, ending with the tool result of the submit
    assert [m["role"] for m in t.messages][:3] == ["system", "user", "assistant"]
    # the tools agent's system prompt, from the snippet's statement (one text for both loops)
    statement = source_for(paper).statement(paper, snippet).model_dump(mode="json")
    assert t.messages[0]["content"] == tools_system_prompt(statement)
    assert f"removed from {snippet.file}" in t.messages[0]["content"]
    assert t.messages[-1]["role"] == "tool"
    assert "tests passed" in t.messages[-1]["content"]
    assert json.loads(t.model_dump_json()) == t.model_dump(mode="json")


def test_a_history_rewriting_template_gives_per_turn_rows_never_a_flat_view(
    task: tuple[Paper, Snippet], require_bwrap: None
) -> None:
    paper, snippet = task
    with ScriptedModelServer(_solve(snippet), tokens="rewrite") as server:
        from rcb_agents.policy import OpenAIPolicy  # openai: imported where used

        policy = OpenAIPolicy("scripted", base_url=server.openai_url)
        t = asyncio.run(rollout(paper, snippet, policy, config=CFG, sandbox=_bwrap()))
    assert t.reward == 2.0
    assert t.tokens == "full"
    assert t.flat is None
    assert all(c.prompt_ids and c.completion_ids for c in t.calls)


def test_a_server_without_tokens_gives_messages_only(
    task: tuple[Paper, Snippet], require_bwrap: None
) -> None:
    paper, snippet = task
    with ScriptedModelServer(_solve(snippet), tokens=None) as server:
        from rcb_agents.policy import OpenAIPolicy  # openai: imported where used

        policy = OpenAIPolicy("scripted", base_url=server.openai_url)
        t = asyncio.run(rollout(paper, snippet, policy, config=CFG, sandbox=_bwrap()))
    assert (t.reward, t.tokens, t.flat) == (2.0, "none", None)
    assert all(c.prompt_ids is None and c.completion_ids is None for c in t.calls)


def test_token_views_need_every_turn_to_extend_the_last() -> None:
    a = ModelTurn(prompt_ids=(1, 2), completion_ids=(3,), logprobs=(-0.1,))
    b = ModelTurn(prompt_ids=(1, 2, 3, 4), completion_ids=(5, 6), logprobs=(-0.2, -0.3))
    coverage, flat = token_views([a, b])
    assert coverage == "full"
    assert flat is not None
    assert flat.ids == (1, 2, 3, 4, 5, 6)
    assert flat.loss_mask == (0, 0, 1, 0, 1, 1)
    assert flat.logprobs == (0.0, 0.0, -0.1, 0.0, -0.2, -0.3)
    rewritten = b.model_copy(update={"prompt_ids": (1, 9, 3, 4)})
    assert token_views([a, rewritten]) == ("full", None)
    assert token_views([a, ModelTurn()]) == ("partial", None)
    assert token_views([ModelTurn()]) == ("none", None)


class ScriptedPolicy:
    """A fake policy: each new conversation gets the next sample number (arrival order), and
    ``script(n, turn)`` says what sample ``n`` does at its ``turn``-th call."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.conversations: dict[int, tuple[int, int]] = {}
        # Conversations are told apart by identity: kept alive, so that a new one never gets
        # the id of one that ended.
        self.seen: list[list[dict[str, Any]]] = []

    async def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        key = id(messages)
        if key not in self.conversations:
            self.seen.append(messages)
        n, turn = self.conversations.get(key, (len(self.conversations), 0))
        self.conversations[key] = (n, turn + 1)
        name, args = self.script(n, turn)
        call = {
            "id": f"c{n}-{turn}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        return PolicyOutput(message={"role": "assistant", "content": None, "tool_calls": [call]})


def test_a_group_of_8_one_template_8_sandboxes_isolated(
    task: tuple[Paper, Snippet], require_bwrap: None
) -> None:
    paper, snippet = task

    def script(n: int, turn: int) -> tuple[str, dict[str, Any]]:
        steps: list[tuple[str, dict[str, Any]]] = [
            ("run_command", {"command": f"echo {n} > mine.txt; ls"}),
            ("replace_in_file", {"path": snippet.file, "old": snippet.todo_body(),
                                 "new": snippet.reference_body if n % 2 == 0 else WRONG}),
            ("submit", {}),
        ]  # fmt: skip
        return steps[min(turn, 2)]

    g = asyncio.run(rollout_group(paper, snippet, ScriptedPolicy(script), 8, config=CFG,
                                  sandbox=_bwrap()))  # fmt: skip
    assert g.templates_prepared == 1
    assert len(g.trajectories) == 8
    assert {t.group_id for t in g.trajectories} == {g.group_id}
    assert sorted(t.sample for t in g.trajectories) == list(range(8))
    # each sample saw only its own file: one sandbox each
    for t in g.trajectories:
        listing = t.steps[0].observation
        assert listing.count("mine.txt") == 1
    assert sorted(t.reward or 0.0 for t in g.trajectories) == [0.0] * 4 + [2.0] * 4
    assert g.complete
    adv = g.advantages()
    assert all(a is not None for a in adv)
    assert sum(a or 0.0 for a in adv) == pytest.approx(0.0)


def test_reuse_mode_resets_one_sandbox_and_checks_it_is_pristine(
    task: tuple[Paper, Snippet], require_bwrap: None
) -> None:
    paper, snippet = task

    def script(n: int, turn: int) -> tuple[str, dict[str, Any]]:
        steps: list[tuple[str, dict[str, Any]]] = [
            ("run_command", {"command": "ls; echo x > leftover.txt"}),
            ("submit", {}),
        ]
        return steps[min(turn, 1)]

    g = asyncio.run(rollout_group(paper, snippet, ScriptedPolicy(script), 8, config=CFG,
                                  sandbox=_bwrap(), mode="reuse"))  # fmt: skip
    assert g.pristine_checks == [True] * 8
    assert g.templates_prepared == 1
    for t in g.trajectories:
        assert "leftover.txt" not in t.steps[0].observation  # the previous sample's file is gone
        assert (t.status, t.reward) == ("completed", 0.0)


def test_rollouts_without_a_factory_share_the_processs_template_and_warm_process(
    task: tuple[Paper, Snippet], require_bwrap: None
) -> None:
    """Concurrent groups (and single rollouts) of one paper, each given only a sandbox setting,
    prepare its template once and hold one warm grading process between them, kept for the
    next rollout, as the trainer adapters' environments do."""
    paper, snippet = task

    def script(n: int, turn: int) -> tuple[str, dict[str, Any]]:
        return ("submit", {})

    async def three_groups() -> list[Any]:
        return list(
            await asyncio.gather(
                *(
                    rollout_group(
                        paper, snippet, ScriptedPolicy(script), 2, config=CFG, sandbox=_bwrap()
                    )
                    for _ in range(3)
                )
            )
        )

    groups = asyncio.run(three_groups())
    assert all(t.reward == 0.0 for g in groups for t in g.trajectories)
    factory = shared.shared_factory(_bwrap())
    assert factory.prepared(paper, snippet)  # the process's, not one closed with its group
    assert shared.warm_processes() == 1  # 3 groups x 2 gradings of one paper: one process
    again = asyncio.run(
        rollout_group(paper, snippet, ScriptedPolicy(script), 2, config=CFG, sandbox=_bwrap())
    )
    assert again.templates_prepared == 0  # the template was already there
    one = asyncio.run(rollout(paper, snippet, ScriptedPolicy(script), config=CFG,
                              sandbox=_bwrap()))  # fmt: skip
    assert one.reward == 0.0
    assert shared.warm_processes() == 1
    shared.close_shared()
    assert shared.warm_processes() == 0


@pytest.fixture
def fake_backend() -> Any:
    register_backend(FakeBackend)
    FakeBackend.log = []
    yield FakeBackend
    FakeBackend.inject = None
    FakeBackend.log = []


def _kill_the_first_sandbox() -> Any:
    """A fault for the fake backend: the first sandbox to run ``rcb-kill-me`` dies."""
    killed: list[str] = []

    def inject(command: str) -> BaseException | None:
        if "rcb-kill-me" in command and not killed:
            killed.append(command)
            return SandboxError("the sandbox died (injected)")
        return None

    return inject


def _kill_then_solve(snippet: Snippet) -> Any:
    def script(n: int, turn: int) -> tuple[str, dict[str, Any]]:
        steps: list[tuple[str, dict[str, Any]]] = [
            ("run_command", {"command": "echo rcb-kill-me"}),
            ("replace_in_file", {"path": snippet.file, "old": snippet.todo_body(),
                                 "new": snippet.reference_body}),
            ("submit", {}),
        ]  # fmt: skip
        return steps[min(turn, 2)]

    return script


@pytest.mark.parametrize(("retries", "on_failure"), [(1, "drop"), (0, "drop"), (0, "refill")])
def test_a_killed_sandbox_in_one_of_8_samples(
    task: tuple[Paper, Snippet], fake_backend: Any, retries: int, on_failure: str
) -> None:
    paper, snippet = task
    fake_backend.inject = _kill_the_first_sandbox()
    script = _kill_then_solve(snippet)

    cfg = CFG.model_copy(update={"retries": retries, "on_failure": on_failure})
    g = asyncio.run(
        rollout_group(paper, snippet, ScriptedPolicy(script), 8, config=cfg,
                      sandbox=SandboxConfig(backend="fake", python=config.task_python()))
    )  # fmt: skip
    if on_failure == "refill":
        # the unscored sample is kept for the record; a new sample of the task took its place
        (t,) = g.replaced
        assert (t.status, t.reward, t.errors[0].type) == ("infra_error", None, "SandboxError")
        assert t.sample not in {x.sample for x in g.trajectories}
        assert sorted(x.sample for x in [*g.trajectories, t]) == list(range(9))
        assert g.complete
        assert not g.dropped
        assert g.advantages() == [0.0] * 8
        return
    hit = [t for t in g.trajectories if t.errors]
    assert len(hit) == 1
    (t,) = hit
    assert t.errors[0].type == "SandboxError"
    others = [x for x in g.trajectories if x is not t]
    assert all((x.attempts, x.reward) == (1, 2.0) for x in others)
    if retries:
        assert (t.attempts, t.status, t.reward) == (2, "completed", 2.0)
        assert g.complete
    else:
        assert (t.attempts, t.status, t.reward, t.passed) == (1, "infra_error", None, None)
        assert t.stop_reason == "infra_error"
        assert not g.complete
        assert g.dropped
        # dropped: no advantages over the 7 scored samples unless asked for explicitly
        assert g.advantages() == [None] * 8
        partial = g.advantages(partial=True)
        assert partial[g.trajectories.index(t)] is None
        assert sum(a is not None for a in partial) == 7


def test_refills_replace_a_refill_that_fails_too_and_share_the_groups_budget(
    task: tuple[Paper, Snippet], fake_backend: Any
) -> None:
    """Both samples die, and so does the first refill: the second refill scores in the first
    member's place, and the second member, the group's 2 refills spent, stays unscored."""
    paper, snippet = task
    killed: list[str] = []

    def kill_three(command: str) -> BaseException | None:
        if "rcb-kill-me" in command and len(killed) < 3:
            killed.append(command)
            return SandboxError("the sandbox died (injected)")
        return None

    fake_backend.inject = kill_three
    cfg = CFG.model_copy(update={"retries": 0, "on_failure": "refill", "refills": 2})
    g = asyncio.run(
        rollout_group(paper, snippet, ScriptedPolicy(_kill_then_solve(snippet)), 2, config=cfg,
                      sandbox=SandboxConfig(backend="fake", python=config.task_python()))
    )  # fmt: skip
    assert len(killed) == 3
    assert [t.sample for t in g.replaced] == [0, 2]  # the first member's, then its first refill
    assert [(t.sample, t.scored) for t in g.trajectories] == [(3, True), (1, False)]
    assert g.dropped


def test_export_jsonl_hf_and_sft_drop_incomplete_groups_and_say_so(
    task: tuple[Paper, Snippet], fake_backend: Any, tmp_path: Path
) -> None:
    import datasets
    from click.testing import CliRunner

    from rcb_env.cli import cli
    from rcb_env.rl.export import COLUMNS, TrajectoryLog

    paper, snippet = task
    fake_backend.inject = _kill_the_first_sandbox()
    script = _kill_then_solve(snippet)

    sandbox = SandboxConfig(backend="fake", python=config.task_python())
    no_retry = CFG.model_copy(update={"retries": 0})
    run = tmp_path / "run"
    log = TrajectoryLog(run)
    for _ in range(2):  # the first group loses a sample for good, the second does not
        g = asyncio.run(rollout_group(paper, snippet, ScriptedPolicy(script), 3, config=no_retry,
                                      sandbox=sandbox))  # fmt: skip
        for t in g.trajectories:
            log.append(t)
    log.close()
    runner = CliRunner()
    result = runner.invoke(cli, ["export", str(run), "--format", "hf", "-o", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    assert "dropped 1 incomplete groups (3 rows)" in result.output
    ds = datasets.load_from_disk(str(tmp_path / "hf"))
    assert ds.column_names == list(COLUMNS)
    assert ds.num_rows == 3
    assert set(ds["reward"]) == {2.0}
    assert all(ds["group_complete"])
    kept = runner.invoke(
        cli, ["export", str(run), "--format", "jsonl", "-o", str(tmp_path / "all.jsonl"),
              "--keep-incomplete"],
    )  # fmt: skip
    assert kept.exit_code == 0, kept.output
    rows = [json.loads(x) for x in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert sum(r["reward"] is None for r in rows) == 1
    sft = runner.invoke(cli, ["export", str(run), "--format", "sft", "-o", str(tmp_path / "s")])
    assert sft.exit_code == 0, sft.output
    chats = [json.loads(x) for x in (tmp_path / "s").read_text().splitlines()]
    assert len(chats) == 3
    assert chats[0]["messages"][0]["role"] == "system"
    assert chats[0]["tools"]


def test_an_evaluation_run_exports_messages_only(tmp_path: Path, require_bwrap: None) -> None:
    import datasets

    from rcb_env.rl.export import export
    from rcb_env.runner import EvalConfig, run_eval

    pset = load(bundled_root())
    paper = pset.paper("adamw-warmup")
    one = pset.model_copy(
        update={"papers": (paper.model_copy(update={"snippets": paper.snippets[:2]}),)}
    )
    run_eval(
        one,
        EvalConfig(
            agent="oracle",
            sandbox=_bwrap(),
            grading=GradingConfig(python=config.task_python(), timeout_s=60),
        ),
        tmp_path / "run",
    )
    report = export(tmp_path / "run", tmp_path / "hf", "hf")
    assert (report.source, report.rows, report.tokens) == ("episodes.jsonl", 2, {"none": 2})
    ds = datasets.load_from_disk(str(tmp_path / "hf"))
    assert ds["tokens"] == ["none", "none"]
    assert ds["flat_ids"] == [[], []]
    first = json.loads(ds["messages"][0])
    assert [m["role"] for m in first] == ["user", "assistant", "tool", "assistant", "tool"]


@pytest.mark.slow
def test_reward_hack_bodies_score_zero_through_rollout(require_bwrap: None) -> None:
    """One attack of each kind (tests/attacks.py), submitted by a policy's edit and submit."""
    from rcb_env.validation.hacks import TARGET
    from tests.attacks import FRONT_DOOR as ATTACKS

    paper = load(bundled_root()).paper(TARGET[0])
    snippet = paper.snippet(TARGET[1])
    cfg = RolloutConfig(grading=GradingConfig(python=config.task_python(), timeout_s=20))
    from rcb_env.sandbox import SandboxFactory

    factory = SandboxFactory(_bwrap())

    def hack(body: str) -> ScriptedPolicy:
        edit = {"path": snippet.file, "old": snippet.todo_body(), "new": body}
        return ScriptedPolicy(
            lambda _n, turn: ("replace_in_file", edit) if turn == 0 else ("submit", {})
        )

    async def every() -> list[Any]:
        gate = asyncio.Semaphore(2)  # two rollouts at a time (2 cores)

        async def one(body: str) -> Any:
            async with gate:
                return await rollout(paper, snippet, hack(body), config=cfg, factory=factory)

        return await asyncio.gather(*(one(b) for b in ATTACKS.values()))

    try:
        results = dict(zip(ATTACKS, asyncio.run(every()), strict=True))
    finally:
        factory.close()
    scored = {name: (t.status, t.reward) for name, t in results.items()}
    assert all(reward == 0.0 for _status, reward in scored.values()), scored


class _Stops:
    """A policy that edits, then ends the way ``how`` says."""

    def __init__(self, snippet: Snippet, how: str) -> None:
        self.snippet, self.how, self.turn = snippet, how, 0

    async def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        from rcb_env.rl import ContextLengthError

        self.turn += 1
        if self.turn == 1:
            edit = {
                "path": self.snippet.file,
                "old": self.snippet.todo_body(),
                "new": self.snippet.reference_body,
            }
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "replace_in_file", "arguments": json.dumps(edit)},
            }
            return PolicyOutput(message={"role": "assistant", "tool_calls": [call]})
        if self.how == "length":
            return PolicyOutput(
                message={"role": "assistant", "content": "..."}, finish_reason="length"
            )
        if self.how == "context":
            raise ContextLengthError("prompt too long")
        return PolicyOutput(message={"role": "assistant", "content": "thinking"})


@pytest.mark.parametrize(
    ("how", "stop"),
    [
        ("length", StopReason.BUDGET_OUTPUT_TOKENS),
        ("context", StopReason.CONTEXT_LENGTH),
        ("talk", StopReason.BUDGET_MODEL_CALLS),
    ],
)
def test_stop_reasons_are_a_closed_set_and_the_workspace_is_graded(
    task: tuple[Paper, Snippet], fake_backend: Any, how: str, stop: StopReason
) -> None:
    paper, snippet = task
    budgets = CFG.episode.budgets.model_copy(update={"max_model_calls": 3})
    cfg = RolloutConfig(episode=CFG.episode.model_copy(update={"budgets": budgets}))
    t = asyncio.run(
        rollout(paper, snippet, _Stops(snippet, how), config=cfg,
                sandbox=SandboxConfig(backend="fake", python=config.task_python()))
    )  # fmt: skip
    assert (t.stop_reason, t.status) == (stop, "truncated")
    assert (t.reward, t.passed) == (2.0, True)  # the edit was made: graded as it stands


def test_max_turns_is_the_episodes_model_call_budget(
    task: tuple[Paper, Snippet], fake_backend: Any
) -> None:
    """A rollout's ``max_turns`` is the episode budget's ``max_model_calls`` (counted by the
    driver's Budgets; the policy agent reads it before each call)."""
    from rcb_env.sandbox import SandboxFactory

    paper, snippet = task
    factory = SandboxFactory(SandboxConfig(backend="fake"))
    try:
        cfg = RolloutConfig(grading=CFG.episode.grading, max_turns=3)  # deprecated keywords
        episode = cfg.make_episode(paper, snippet, factory, "e")
    finally:
        factory.close()
    budgets = episode.config.budgets
    assert (budgets.max_model_calls, budgets.max_steps) == (3, None)
