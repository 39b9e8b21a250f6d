"""The real agent CLIs as episode agents, through the stock runner (``run_eval``) on a bundled
task, in bwrap: each CLI runs inside the episode's sandbox, edits the file with its own tool as
a scripted model of ours says (:mod:`rcb_agents.testing.cli_oracle`, one answer per episode and
turn), its model behind the run's one proxy holding the real key; the workspace is graded like
a submit when it ends.

One run per CLI (a module fixture) holds an episode per case, on ``adamw-warmup`` (numpy only:
its gradings are quick): the reference body passes with its line weight (and the agent's own
shell finds no key and no network), a wrong body scores 0, a token budget truncates it (graded
as it stands), an upstream 500 is infrastructure, and the CLI exiting on an error of its own is
the agent's failure (graded as it stands). Claude Code's and Codex's runs are in ``make test``;
mini-swe-agent's and the docker runs (the same cases in a ``--network=none`` container) are
marked ``agent_clis`` (``make test-agent-clis``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rcb_agents import clis
from rcb_agents.testing.cli_oracle import Act, CliOracle, Play, key_pattern, turn, wire_of
from rcb_agents.testing.server import Fault, ScriptedModelServer

from rcb_env import config
from rcb_env.agent import ProgramAgent
from rcb_env.episode.config import BudgetConfig, EpisodeConfig
from rcb_env.episode.driver import Episode
from rcb_env.episode.outcome import EpisodeStatus, StopReason
from rcb_env.grading.grader import GradingConfig
from rcb_env.results.records import EpisodeRecord, read_records
from rcb_env.rl.atif import export_atif
from rcb_env.runner import EvalConfig
from rcb_env.runner.eval import run_eval
from rcb_env.sandbox import SandboxConfig
from rcb_env.sandbox.program import Program, ProgramRunner
from rcb_env.task import bundled_root, load
from rcb_env.task.selection import select_snippets

KEY = "sk-real-key-MARKER-7f3a"
PAPER = "adamw-warmup"
ORACLE, WRONG, BUDGET, UPSTREAM, CRASH = (
    f"{PAPER}/clip by global norm",
    f"{PAPER}/adamw step",
    f"{PAPER}/warmup cosine schedule",
    f"{PAPER}/moment updates",
    f"{PAPER}/cosine decay",
)
#: The run's token budget: the budget case's first answer alone spends more.
TOKENS = 5_000

#: What the agent finds from inside, with its own shell tool: the real key anywhere (its
#: environment, any process's environment or command line, any file of /tmp or its home), its
#: own token (so the search itself works), and whether the internet or the host's ports answer.
SPY = (
    "echo key_in_env=$(env | grep -c '{key}'); "
    "echo key_in_proc=$(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null"
    " | tr '\\0' '\\n' | grep -c '{key}'); "
    "echo key_in_files=$(grep -rl '{key}' /tmp $HOME 2>/dev/null | wc -l); "
    "echo token_seen=$( (env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n')"
    " | grep -c '=rcb-'); "
    "curl -sS -m 5 -o /dev/null http://1.1.1.1/ 2>/dev/null; echo internet=$?; "
    "for port in {ports}; do curl -sS -m 5 -o /dev/null http://127.0.0.1:$port/ 2>/dev/null;"
    " echo host_port=$?; done"
)
SPIED = ("key_in_env", "key_in_proc", "key_in_files", "token_seen", "internet", "host_port")


@dataclass
class CliRun:
    """One run of a CLI over the cases: its records by snippet, the server's requests."""

    records: dict[str, EpisodeRecord]
    server: ScriptedModelServer
    run_dir: Path

    def spied(self) -> dict[str, list[str]]:
        """What the spy printed (it came back to the model as the shell tool's result; the
        command itself prints no digit after ``=``)."""
        for _path, body in self.server.requests:
            text = json.dumps(body)
            if "key_in_env=" in text:
                found: dict[str, list[str]] = {}
                for name, value in re.findall(rf"({'|'.join(SPIED)})=(\d+)", text):
                    found.setdefault(name, []).append(value)
                return found
        return {}


def _installed(cli: clis.AgentCli) -> None:
    if cli.executable() is None:
        reason = f"{cli.name} {cli.version} is not installed (rcb-env agents install {cli.name})"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def _plays(spy: str) -> Mapping[str, Play]:
    return {
        ORACLE: (Act("oracle"), Act("shell", spy), Act("end")),
        WRONG: (Act("wrong"), Act("end")),
        BUDGET: (Act("oracle", input_tokens=TOKENS * 2), Act("end")),
        UPSTREAM: (Fault(status=500),),
        # the CLI's own failure: the endpoint turns its second call down (400: the agent's
        # request, not the endpoint's failure) and it exits with an error
        CRASH: (Act("oracle"), Fault(status=400, message="scripted: bad request")),
    }


def _run(cli: clis.AgentCli, tmp: Path, sandbox: SandboxConfig | None = None) -> Iterator[CliRun]:
    _installed(cli)
    pset = select_snippets(
        load(bundled_root(), papers={PAPER}), (ORACLE, WRONG, BUDGET, UPSTREAM, CRASH)
    )
    oracle = CliOracle(pset)
    with (
        pytest.MonkeyPatch.context() as mp,
        ScriptedModelServer(api_key=KEY, responder=oracle) as server,
    ):
        # the real key in the host's environment: the run's proxy takes it from there
        mp.setenv("ANTHROPIC_API_KEY", KEY)
        mp.setenv("OPENAI_API_KEY", KEY)
        ports = " ".join(u.rsplit(":", 1)[1].split("/")[0] for u in (server.url,))
        oracle.plays = dict(_plays(SPY.format(key=key_pattern(KEY), ports=ports)))
        cfg = EvalConfig(
            agent=cli.name,
            model={"spec": f"{cli.provider}:rcb-scripted", "base_url": server.url},
            sandbox=sandbox or SandboxConfig(backend="bwrap", python=config.task_python()),
            grading=GradingConfig(python=None if sandbox else config.task_python(), timeout_s=60),
            budgets=BudgetConfig(max_tokens=TOKENS, max_wall_s=300),
        )
        run_dir = tmp / "run"
        run_eval(pset, cfg, run_dir, jobs=2, infra_retries=0)
        records = {r.snippet_id: r for r in read_records(run_dir / "episodes.jsonl")}
        yield CliRun(records, server, run_dir)


@pytest.fixture(scope="module")
def claude_run(require_bwrap: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliRun]:
    yield from _run(clis.CLAUDE_CODE, tmp_path_factory.mktemp("claude"))


@pytest.fixture(scope="module")
def codex_run(require_bwrap: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliRun]:
    yield from _run(clis.CODEX, tmp_path_factory.mktemp("codex"))


@pytest.fixture(scope="module")
def mini_run(require_bwrap: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliRun]:
    yield from _run(clis.MINI_SWE_AGENT, tmp_path_factory.mktemp("mini"))


@pytest.fixture(scope="module")
def claude_docker_run(
    docker_images: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CliRun]:
    docker = SandboxConfig(backend="docker", options={"docker_base": docker_images})
    yield from _run(clis.CLAUDE_CODE, tmp_path_factory.mktemp("claude-docker"), docker)


@pytest.fixture(scope="module")
def codex_docker_run(
    docker_images: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CliRun]:
    docker = SandboxConfig(backend="docker", options={"docker_base": docker_images})
    yield from _run(clis.CODEX, tmp_path_factory.mktemp("codex-docker"), docker)


RUNS = pytest.mark.parametrize(
    "run_name",
    [
        pytest.param("claude_run", marks=[pytest.mark.bwrap, pytest.mark.slow]),
        pytest.param("codex_run", marks=[pytest.mark.bwrap, pytest.mark.slow]),
        pytest.param("mini_run", marks=[pytest.mark.bwrap, pytest.mark.agent_clis]),
        pytest.param("claude_docker_run", marks=[pytest.mark.docker, pytest.mark.agent_clis]),
        pytest.param("codex_docker_run", marks=[pytest.mark.docker, pytest.mark.agent_clis]),
    ],
)


def _get(request: pytest.FixtureRequest, name: str) -> CliRun:
    run: CliRun = request.getfixturevalue(name)
    return run


@RUNS
def test_the_reference_body_written_by_the_clis_own_tool_passes_with_its_weight(
    request: pytest.FixtureRequest, run_name: str
) -> None:
    """The CLI writes the file with its own edit tool and exits; the block is graded like a
    submit without body (``completed``: its exit is its submit) and passes with its line
    weight. The record names the agent and its version and holds every model call the proxy
    saw, with its usage; the ATIF export has them too."""
    run = _get(request, run_name)
    r = run.records[ORACLE]
    assert r.status is EpisodeStatus.COMPLETED, r.infra_error
    assert r.reason is StopReason.SUBMIT
    assert r.passed is True
    assert r.reward == r.weight == 6
    cli = clis.CLIS[r.agent["name"]]
    assert r.agent["version"] == cli.version
    assert r.agent["exit_code"] == 0
    assert r.agent["crashed"] is False
    assert len(r.model_calls) == 3
    assert all(c["usage"]["input_tokens"] == 100 for c in r.model_calls)
    assert r.tokens == 3 * 120
    [atif] = [
        json.loads(p.read_text())
        for p in export_atif(run.run_dir, run.run_dir / "atif")
        if "clip_by_global_norm" in p.name
    ]
    assert atif["agent"]["name"] == cli.name
    assert atif["agent"]["version"] == cli.version
    assert atif["final_metrics"]["total_prompt_tokens"] == 300
    assert len(atif["extra"]["model_calls"]) == 3


@RUNS
def test_the_agent_finds_no_key_and_no_network(
    request: pytest.FixtureRequest, run_name: str
) -> None:
    """Its own shell, inside: the real key is nowhere (environment, /proc, files), its episode
    token is there (the search works); ``curl`` to the internet and to the host's model server
    port fails."""
    seen = _get(request, run_name).spied()
    [token_seen] = seen["token_seen"]
    assert int(token_seen) > 0  # (Codex keeps it out of its commands' environment)
    assert seen["key_in_env"] == seen["key_in_proc"] == seen["key_in_files"] == ["0"]
    assert seen["internet"] != ["0"]
    assert seen["host_port"]
    assert "0" not in seen["host_port"]


@RUNS
def test_a_wrong_body_scores_zero(request: pytest.FixtureRequest, run_name: str) -> None:
    r = _get(request, run_name).records[WRONG]
    assert r.status is EpisodeStatus.COMPLETED
    assert r.passed is False
    assert r.reward == 0.0


@RUNS
def test_a_token_budget_truncates_and_grades_as_it_stands(
    request: pytest.FixtureRequest, run_name: str
) -> None:
    """The first answer spends more than the run's token budget: the proxy refuses the next
    call, the CLI stops, the episode is truncated for its token budget and the file it wrote
    is graded (it passes)."""
    r = _get(request, run_name).records[BUDGET]
    assert r.status is EpisodeStatus.TRUNCATED
    assert r.reason is StopReason.BUDGET_TOKENS
    assert r.passed is True
    assert len(r.model_calls) == 1
    assert r.tokens == TOKENS * 2 + 20


@RUNS
def test_an_upstream_500_is_infrastructure(request: pytest.FixtureRequest, run_name: str) -> None:
    r = _get(request, run_name).records[UPSTREAM]
    assert r.status is EpisodeStatus.INFRA_ERROR
    assert r.infra_error is not None
    assert r.infra_error.stage == "model"
    assert "HTTP 500" in r.infra_error.message


@RUNS
def test_the_cli_failing_on_its_own_is_the_agents_failure(
    request: pytest.FixtureRequest, run_name: str
) -> None:
    """The CLI exits with an error of its own (its request turned down with a 400): not
    infrastructure; the workspace is graded as it stands and the record says it crashed."""
    r = _get(request, run_name).records[CRASH]
    assert r.status is EpisodeStatus.TRUNCATED
    assert r.reason is StopReason.AGENT_STOPPED
    assert r.agent["crashed"] is True
    assert r.agent["exit_code"] != 0
    assert r.passed is True


def test_the_oracle_plays_each_clis_own_tools() -> None:
    """The scripted model's answers per wire format: Claude Code's Write, Codex's apply_patch
    through exec_command, mini-swe-agent's bash, the tools agent's write_file; the next turn
    ends the episode (the tools agent's: ``submit``)."""
    pset = select_snippets(load(bundled_root(), papers={PAPER}), (ORACLE,))
    oracle = CliOracle(pset)
    statement = next(iter(n for n, _p, _s in oracle.snippets))
    first: dict[str, Any] = {"messages": [{"role": "user", "content": f"x {statement} y"}]}
    write = oracle("/v1/messages?beta=true", first)
    assert write is not None
    assert not isinstance(write, Fault)
    assert write.tool_calls[0][0] == "Write"
    patch = oracle("/v1/responses", {"input": [{"role": "user", "content": statement}]})
    assert patch is not None
    assert not isinstance(patch, Fault)
    assert "*** Update File: optim.py" in str(patch.tool_calls[0][1])
    done = {"messages": [*first["messages"], {"role": "tool", "content": "ok"}]}
    assert turn(wire_of("/v1/chat/completions"), done) == 1
    end = oracle("/v1/chat/completions", done)
    assert end is not None
    assert not isinstance(end, Fault)
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in str(end.tool_calls[0][1])
    assert oracle("/v1/messages", {"messages": [{"role": "user", "content": "?"}]}) == Fault(
        status=400, message="scripted model: no snippet in this request"
    )
    # rcb-env's own tools agent (a chat request offering ``submit``): write_file, then submit
    tools = [{"type": "function", "function": {"name": n}} for n in ("write_file", "submit")]
    mine = {"messages": first["messages"], "tools": tools}
    assert wire_of("/v1/chat/completions", mine) == "tools"
    written = oracle("/v1/chat/completions", mine)
    assert written is not None
    assert not isinstance(written, Fault)
    assert written.tool_calls[0][0] == "write_file"
    assert isinstance(args := written.tool_calls[0][1], dict)
    assert args["path"] == "optim.py"
    submitted = oracle("/v1/chat/completions", {**done, "tools": tools})
    assert submitted is not None
    assert not isinstance(submitted, Fault)
    assert submitted.tool_calls[0][0] == "submit"
    assert oracle.answered == 3
    assert oracle.unknown == 1


class _Sleeper:
    """A program agent whose program outlives the episode's wall-clock budget."""

    name = "sleeper"

    def start(self, observation: str, info: dict[str, Any], tools: Any) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        raise TypeError("driven through work()")

    def work(self, statement: str, info: dict[str, Any], runner: ProgramRunner) -> str:
        result = runner.run(Program(argv=("/bin/sleep", "120"), files={"note.txt": "x"}))
        self.saw_home = (runner.host_home / "note.txt").read_text()
        assert result.timed_out == runner.timed_out
        return "budget_wall_s" if runner.timed_out else "agent_stopped"

    def end(self, info: dict[str, Any]) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


@pytest.mark.bwrap
@pytest.mark.slow
def test_the_wall_clock_budget_kills_the_program_and_grades_the_workspace(
    require_bwrap: None,
) -> None:
    """The driver's runner kills the program at the episode's wall-clock budget; the episode
    is truncated for it and graded as the workspace stands (the masked block: it fails)."""
    pset = select_snippets(load(bundled_root(), papers={PAPER}), (WRONG,))
    [paper] = pset.papers
    [snippet] = paper.snippets
    cfg = EpisodeConfig(
        sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
        grading=GradingConfig(python=config.task_python(), timeout_s=60),
        budgets=BudgetConfig(max_wall_s=3),
    )
    agent = _Sleeper()
    assert isinstance(agent, ProgramAgent)
    episode = Episode(paper, snippet, config=cfg)
    t0 = time.monotonic()
    try:
        outcome = episode.run(agent)
    finally:
        episode.close()
    assert time.monotonic() - t0 < 60
    assert outcome.status is EpisodeStatus.TRUNCATED
    assert outcome.reason is StopReason.BUDGET_WALL_S
    assert outcome.passed is False
    assert agent.saw_home == "x"


@pytest.mark.bwrap
@pytest.mark.slow
def test_the_runs_concurrency_cap_holds_for_the_clis_model_calls(
    require_bwrap: None, tmp_path: Path
) -> None:
    """The run's rate cap (``--concurrency``: model calls in flight to one endpoint at once,
    across every worker) holds for agent CLIs too: their calls go through the run's proxy,
    which takes the same cap. Two episodes at once, each call answered after a pause: with a
    cap of 1 the endpoint never sees two calls at once; with 2 it does (so the check can fail)."""
    cli = clis.CLAUDE_CODE
    _installed(cli)
    pset = select_snippets(load(bundled_root(), papers={PAPER}), (ORACLE, WRONG))
    oracle = CliOracle(pset)

    def slow(path: str, body: dict[str, Any]) -> Any:
        time.sleep(0.8)
        return oracle(path, body)

    seen = {}
    for cap in (1, 2):
        with (
            pytest.MonkeyPatch.context() as mp,
            ScriptedModelServer(api_key=KEY, responder=slow) as server,
        ):
            mp.setenv("ANTHROPIC_API_KEY", KEY)
            cfg = EvalConfig(
                agent=cli.name,
                model={
                    "spec": f"{cli.provider}:rcb-scripted",
                    "base_url": server.url,
                    "concurrency": cap,
                },
                sandbox=SandboxConfig(backend="bwrap", python=config.task_python()),
                grading=GradingConfig(python=config.task_python(), timeout_s=60),
                budgets=BudgetConfig(max_wall_s=300),
            )
            run_dir = tmp_path / f"cap{cap}"
            run_eval(pset, cfg, run_dir, jobs=2, infra_retries=0)
            records = list(read_records(run_dir / "episodes.jsonl"))
            assert [r.status for r in records] == [EpisodeStatus.COMPLETED] * 2
            seen[cap] = server.max_in_flight
    assert seen == {1: 1, 2: 2}
