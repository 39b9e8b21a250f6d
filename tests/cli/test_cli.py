"""The command line as a user meets it: distinct exit codes, lazy registration at import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from rcb_env.cli import app
from tests.conftest import math_files, write_paper, write_pset


def _rcb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rcb_env", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = {name: value for name, value in vars(app).items() if name.startswith("EXIT_")}
    assert len(set(codes.values())) == len(codes) == 7
    cli_page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    for value in codes.values():
        assert f"| {value} |" in cli_page, f"exit code {value} is not in docs/cli.md's table"


def test_an_rcb_error_a_usage_error_and_findings_exit_differently(tmp_path: Path) -> None:
    pset = write_pset(tmp_path, [write_paper(tmp_path, "maths", math_files())])
    runs = tmp_path / "runs"
    broken = _rcb("eval", "--agent", "nope.module:Thing", "--pset", str(pset), "--sandbox", "local",
                  "--runs-dir", str(runs))  # fmt: skip
    assert broken.returncode == app.EXIT_ERROR, broken.stderr
    assert "cannot import nope.module" in broken.stderr
    assert not runs.exists()  # nothing of a run was left: the agent is resolved first
    usage = _rcb("tasks", "--no-such-option")
    assert usage.returncode == app.EXIT_USAGE
    (pset / "maths" / "stats.py").write_text('# <paper2code name="x">\n')  # unclosed marker
    bad = _rcb("tasks", "--pset", str(pset))
    assert bad.returncode == app.EXIT_FINDINGS
    assert "stats.py:1" in bad.stderr


def test_import_registers_ids_without_loading_any_task() -> None:
    script = textwrap.dedent(
        """
        import gymnasium as gym
        import rcb_env
        from rcb_env.episode import registry
        ids = sorted(i for i in gym.registry if i.startswith("rcb/"))
        assert registry._bundled.cache_info().currsize == 0, "tasks were loaded at import"
        loaded = rcb_env.load(rcb_env.bundled_root())
        expected = sorted(
            registry.env_id(p.slug, s.slug) for p in loaded.papers for s in p.snippets
        )
        assert ids == expected, (ids, expected)
        print(len(ids))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) >= 20


def test_eval_takes_a_run_file_and_a_flag_overrides_it(tmp_path: Path) -> None:
    """One model for both: the run file's options, the command line's flags on top."""
    import json

    pset = write_pset(tmp_path, [write_paper(tmp_path, "maths", math_files())])
    runs = tmp_path / "runs"
    run_file = tmp_path / "run.yaml"
    run_file.write_text(
        f"agent: oracle\npset: [{pset}]\nsnippets: variance\nsandbox: local\n"
        f"runs-dir: {runs}\nsamples: 1\nmax_steps: 7\ntest_feedback: none\n"
    )
    done = _rcb("eval", "--config", str(run_file), "--samples", "2")
    assert done.returncode == 0, done.stderr
    (run,) = runs.iterdir()
    config = json.loads((run / "run.json").read_text())["config"]
    assert config["agent"] == "oracle"
    assert config["samples"] == 2  # the flag won
    assert config["budgets"]["max_steps"] == 7  # from the file
    assert config["env"]["test_feedback"] == "none"
    records = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert [(r["snippet_id"], r["passed"]) for r in records] == [("maths/variance", True)] * 2
    run_file.write_text("agent: oracle\nmax_stepz: 3\n")
    bad = _rcb("eval", "--config", str(run_file))
    assert bad.returncode == app.EXIT_ERROR, bad.stderr
    assert "max_stepz" in bad.stderr
    missing = _rcb("eval", "--pset", str(pset))
    assert missing.returncode == app.EXIT_ERROR
    assert "agent" in missing.stderr


def test_the_run_files_defaults_are_the_flags_defaults() -> None:
    """A run file leaves out what it does not set: each option then has the value the flag
    would have had (the flag's default is its field's, see tests/cli/test_run_spec.py)."""
    from rcb_env.runner.spec import RunSpec

    flags = RunSpec.build({"agent": "oracle"})
    run_file = RunSpec.model_validate({"eval": {"agent": "oracle"}})
    assert flags == run_file


def test_bad_input_at_the_command_line_gets_the_command_lines_words(tmp_path: Path) -> None:
    """A required option given nowhere is named as its flag; a run file that is not YAML is
    named with its line; a folder that is no run is refused by ``summary`` as by ``compare``."""
    pset = write_pset(tmp_path, [write_paper(tmp_path, "maths", math_files())])
    missing = _rcb("eval", "--pset", str(pset))
    assert missing.returncode == app.EXIT_ERROR
    assert "--agent is required" in missing.stderr, missing.stderr
    assert "valid string" not in missing.stderr
    run_file = tmp_path / "run.yaml"
    run_file.write_text("agent: oracle\n  samples: [\n")
    bad = _rcb("eval", "--config", str(run_file))
    assert bad.returncode == app.EXIT_ERROR
    assert f"in {run_file}, line 2" in bad.stderr, bad.stderr
    assert "<unicode string>" not in bad.stderr
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    for command in ("summary", "compare"):
        refused = _rcb(command, str(empty))
        assert refused.returncode == app.EXIT_ERROR, (command, refused.stdout)
        assert "is not a run folder" in refused.stderr, refused.stderr


class ModelAgent:
    """An outside agent class that asks for the run's model settings and options by name
    (used by path below); it submits at once and says what it was given."""

    def __init__(self, model: dict[str, object], options: dict[str, object]) -> None:
        self.model = model
        self.options = options

    def start(self, observation: str, info: dict[str, object], tools: object) -> None:
        pass

    def act(self, observation: str, info: dict[str, object]) -> object:
        from rcb_env.tools.actions import Submit

        return Submit()

    def end(self, info: dict[str, object]) -> None:
        pass

    def describe(self) -> dict[str, object]:
        return {"name": "model-agent", "model": self.model["spec"], "options": self.options}


def test_an_outside_agent_class_gets_the_model_it_asks_for(tmp_path: Path) -> None:
    import json

    pset = write_pset(tmp_path, [write_paper(tmp_path, "maths", math_files())])
    runs = tmp_path / "runs"
    common = ("--agent", "tests.cli.test_cli:ModelAgent", "--pset", str(pset), "--sandbox", "local")
    done = _rcb("eval", *common, "--snippet", "variance", "--runs-dir", str(runs),
                "--model", "openai:some-model", "--base-url", "http://127.0.0.1:9/v1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = runs.iterdir()
    (record,) = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert record["agent"]["model"] == "openai:some-model"
    assert record["agent"]["options"] == {"with_paper": True}
    unnamed = _rcb("eval", *common, "--runs-dir", str(tmp_path / "other"))
    assert unnamed.returncode == app.EXIT_ERROR
    assert "needs a model: pass --model" in unnamed.stderr, unnamed.stderr


def test_agents_lists_the_agent_clis_and_refuses_an_unknown_name() -> None:
    """``rcb-env agents list``: each pinned CLI with its version, install state and wire
    format; ``agents install`` of an unknown name is an error naming the known ones; a CLI
    agent given another provider's model is refused before anything runs."""
    import pytest
    from click.testing import CliRunner
    from rcb_agents.clis import CLIS

    from rcb_env.agent import agent_factory, install_agent_program
    from rcb_env.errors import ConfigError
    from rcb_env.task import Pset

    listed = CliRunner().invoke(app.cli, ["agents", "list"], terminal_width=200)
    assert listed.exit_code == 0, listed.output
    for cli in CLIS.values():
        assert cli.name in listed.output
        assert cli.version in listed.output
        assert cli.wire in listed.output
    with pytest.raises(ConfigError, match="claude-code"):
        install_agent_program("no-such-cli")
    with pytest.raises(ConfigError, match="openai:NAME"):
        agent_factory("codex", Pset(root=Path("."), papers=()), model={"spec": "anthropic:m"})
