"""The command line as a user meets it: distinct exit codes, lazy registration at import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from rcb_env.cli import _app
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
    codes = {name: value for name, value in vars(_app).items() if name.startswith("EXIT_")}
    assert len(set(codes.values())) == len(codes) == 6
    cli_page = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    for value in codes.values():
        assert f"| {value} |" in cli_page, f"exit code {value} is not in docs/cli.md's table"


def test_an_rcb_error_a_usage_error_and_findings_exit_differently(tmp_path: Path) -> None:
    pset = write_pset(tmp_path, [write_paper(tmp_path, "maths", math_files())])
    broken = _rcb("eval", "--agent", "nope.module:Thing", "--pset", str(pset), "--sandbox", "local")
    assert broken.returncode == _app.EXIT_ERROR, broken.stderr
    assert "cannot import nope.module" in broken.stderr
    usage = _rcb("tasks", "--no-such-option")
    assert usage.returncode == _app.EXIT_USAGE
    (pset / "maths" / "stats.py").write_text('# <paper2code name="x">\n')  # unclosed marker
    bad = _rcb("tasks", "--pset", str(pset))
    assert bad.returncode == _app.EXIT_FINDINGS
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
