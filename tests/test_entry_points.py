"""A sandbox backend and a task source from outside the repository: a distribution declares them
in rcb-env's entry-point groups, and the stock ``rcb-env eval`` selects them by name (the
backend) and by layout (the source), with nothing registered by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rcb_env.sandbox.registry import BACKENDS_GROUP
from rcb_env.task.source import SOURCES_GROUP
from tests.conftest import math_files, write_paper, write_pset

_PACKAGE = '''
"""An outside package: a backend and a task source of its own."""
from pathlib import Path

from rcb_env.sandbox.backends.local import LocalBackend
from rcb_env.task.paper2code import Paper2Code


class OutsideBackend(LocalBackend):
    name = "outside-local"


class OutsideSource(Paper2Code):
    """The paper2code layout, marked by a file named OUTSIDE; its papers are its own."""

    name = "outside"

    @classmethod
    def detect(cls, root: Path) -> bool:
        return (root / "OUTSIDE").is_file()

    def load(self, root, *, papers=None, overlay=None):
        pset = super().load(root, papers=papers, overlay=overlay)
        mine = tuple(p.model_copy(update={"source": self.name}) for p in pset.papers)
        return pset.model_copy(update={"papers": mine})
'''


def _install(site: Path) -> None:
    """The package and its distribution's metadata, as pip would leave them on a path."""
    (site / "outside_rcb").mkdir(parents=True)
    (site / "outside_rcb" / "__init__.py").write_text(_PACKAGE)
    info = site / "outside_rcb-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-rcb\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            f"""\
            [{BACKENDS_GROUP}]
            outside-local = outside_rcb:OutsideBackend

            [{SOURCES_GROUP}]
            outside = outside_rcb:OutsideSource
            """
        )
    )


def test_a_backend_and_a_task_source_declared_outside_run_from_the_stock_command(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    _install(site)
    pset = write_pset(tmp_path / "tasks", [write_paper(tmp_path / "tasks", "maths", math_files())])
    (pset / "OUTSIDE").write_text("")
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(site)}
    argv = [sys.executable, "-m", "rcb_env", "eval", "--agent", "oracle", "--pset", str(pset)]
    argv += ["--sandbox", "outside-local", "--runs-dir", str(runs)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = runs.iterdir()
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["config"]["sandbox"]["backend"] == "outside-local"
    records = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert records, "no episode ran"
    assert all(r["passed"] for r in records), [r["snippet_id"] for r in records]
    listed = subprocess.run(
        [sys.executable, "-m", "rcb_env", "tasks", "--pset", str(pset), "--json"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr[-500:]
    assert [p["source"] for p in json.loads(listed.stdout)["papers"]] == ["outside"]
    # Without the distribution on the path, neither name is known.
    gone = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert gone.returncode != 0
    assert "outside-local" in gone.stderr
