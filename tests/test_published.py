"""ResearchCodeBench itself: get it by name (verified), its overlay, its published results, and
oracle/null/tools episodes on the papers whose tests run with the default task interpreter.

The published set is read from ``../shared/benchmarks/`` beside the checkout: these tests FAIL
in CI when it is missing and skip elsewhere. The full runnable-set runs are `make published`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rcb_agents.models import ModelConfig, RetryPolicy
from rcb_agents.testing import Reply, ScriptedModelServer

import rcb_env
from rcb_env import catalog, config
from rcb_env.catalog import Benchmark, fetch
from rcb_env.errors import MissingTaskFileError
from rcb_env.grading import GradingConfig
from rcb_env.results import read_records
from rcb_env.results.compare import compare
from rcb_env.results.imported import import_results
from rcb_env.results.summary import summarize_run
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import Pset
from rcb_env.task import environments as envs
from rcb_env.task.selection import load_subset
from rcb_env.validation import audit as leak_audit
from tests.conftest import math_files, write_paper, write_pset

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "benchmarks" / "researchcodebench"
#: Papers whose references pass with the default task interpreter (torch 2.13.0 CPU, numpy).
DEFAULT_INTERPRETER_PAPERS = ("minp", "Tanh-Init", "TabDiff")
#: The installer's task interpreter, read before any test points RCB_ENV_HOME elsewhere.
TASK_PYTHON = config.task_python()


@pytest.fixture(scope="session")
def shared() -> Path:
    if not (SHARED / "pset" / "papers.yaml").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the published set must be beside the checkout in CI: {SHARED}")
        pytest.skip(f"no copy of the published set at {SHARED}")
    return SHARED


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh rcb-env home, so `get` really installs."""
    where = tmp_path / "home"
    monkeypatch.setenv("RCB_ENV_HOME", str(where))
    return where


@pytest.fixture
def published(shared: Path, home: Path) -> Pset:
    fetch.fetch(catalog.benchmark("researchcodebench"), str(shared / "pset"))
    return rcb_env.load("researchcodebench")


def test_get_verifies_and_the_name_loads_the_whole_set(published: Pset, home: Path) -> None:
    assert published.benchmark == "researchcodebench"
    assert published.root == catalog.benchmark("researchcodebench").local_path()
    assert published.root.is_relative_to(home)
    assert (len(published.papers), len(published.snippets)) == (20, 212)
    assert sum(s.weight for s in published.snippets) == 1449
    assert sum(s.distinct_lines for s in published.snippets) == 822
    assert sum(1 for s in published.snippets if s.depth == 0) == 77
    counts = {p.id: (len(p.snippets), p.total_weight) for p in published.papers}
    assert counts["DyT"] == (9, 18)
    assert counts["eomt"] == (37, 324)
    assert counts["GMFlow"] == (16, 164)
    assert counts["hyla"] == (3, 9)
    assert counts["minp"] == (7, 18)


def test_get_installs_the_papers_results_file_so_hard_needs_no_flag(
    published: Pset, shared: Path, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rcb-env get`` installs the paper's results file beside the tasks (checked against its
    pinned hash), and the difficulty subsets read it with no flag; a results file of another
    content is left out (the tasks still install)."""
    monkeypatch.delenv("RCB_PUBLISHED_RESULTS", raising=False)
    bench = catalog.benchmark("researchcodebench")
    assert bench.results_path().read_bytes() == (shared / "overall_stats.json").read_bytes()
    assert bench.results_path().is_relative_to(home)
    assert catalog.published_results() == bench.results_path()
    hard = load_subset("hard")
    assert len(hard.snippets) == 22  # a tenth of 212, rounded up
    copy = tmp_path / "copy"
    shutil.copytree(shared / "pset", copy / "pset")
    (copy / "overall_stats.json").write_text("{}")
    fetch.fetch(bench, str(copy / "pset"), force=True)
    assert not bench.results_path().exists()
    assert catalog.published_results() is None


def test_a_name_that_was_not_fetched_says_how(home: Path) -> None:
    with pytest.raises(MissingTaskFileError, match="rcb-env get researchcodebench"):
        rcb_env.load("researchcodebench")


def test_a_modified_copy_is_refused_and_nothing_installed(
    shared: Path, tmp_path: Path, home: Path
) -> None:
    copy = tmp_path / "pset"
    shutil.copytree(shared / "pset", copy)
    (copy / "minp" / "implementation.py").write_text("# changed\n")
    with pytest.raises(fetch.FetchError, match="nothing was installed"):
        fetch.fetch(catalog.benchmark("researchcodebench"), str(copy))
    assert not catalog.benchmark("researchcodebench").local_path().exists()


def test_the_overlay_covers_every_paper(published: Pset) -> None:
    for paper in published.papers:
        o = paper.overlay
        assert o.environment is not None, paper.id
        assert o.requirements, paper.id
        assert all("==" in r or not r.startswith("torch") for r in o.requirements), (
            f"{paper.id}: torch must be pinned"
        )
    # what kept GMFlow and REPA-E from running is declared, for a networked setup to fetch
    assert not [p.id for p in published.papers if p.overlay.known_issue]
    assert [a.path for a in published.paper("REPA-E").overlay.assets] == [
        "torch/hub/checkpoints/vgg16-397923af.pth",
        "workspace/pretrained/lpips/vgg.pth",
    ]
    assert envs.spec_for(published.paper("GMFlow")).git_packages  # type: ignore[union-attr]
    schedule_free = published.paper("schedule_free")
    assert "schedulefree/adamw_schedulefree.py" in schedule_free.hidden_paths
    # the stand-in rides with the environment that needs it
    assert published.paper("advantage-alignment").overlay.standins == ("meltingpot",)


def test_hidden_paths_never_reach_the_workspace(published: Pset, tmp_path: Path) -> None:
    from rcb_env.sandbox.workspace import build_template

    paper = published.paper("schedule_free")
    t = build_template(paper, paper.snippets[0], tmp_path / "t")
    files = {p.relative_to(t).as_posix() for p in t.rglob("*") if p.is_file()}
    assert not any(f.startswith("schedulefree/") for f in files)
    assert "paper2code_test.py" not in files
    assert not any(f.endswith("_ref.py") for f in files)


def _tiny_benchmark(root: Path) -> tuple[Benchmark, Path]:
    """A small benchmark of our own in a git repository, to exercise the download paths."""
    repo = root / "repo"
    pset = repo / "pset"
    write_pset(pset, [write_paper(pset, "maths", math_files())])
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
        check=True,
    )
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    bench = Benchmark(
        name="tiny",
        title="tiny",
        repository=str(repo),
        commit=commit,
        folder="pset",
        tree_hash=fetch.tree_hash(pset),
    )
    return bench, repo


def test_get_from_a_git_repository(tmp_path: Path, home: Path) -> None:
    bench, repo = _tiny_benchmark(tmp_path)
    path = fetch.fetch(bench, f"file://{repo}")
    assert (path / "maths" / "stats.py").is_file()
    assert (path / fetch.VERIFIED).read_text().startswith(bench.commit)
    assert not (path / ".git").exists()


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    served = tmp_path / "served"
    served.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(served))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()


def test_get_an_archive_served_on_localhost(
    tmp_path: Path, home: Path, http_root: tuple[str, Path]
) -> None:
    url, served = http_root
    bench, repo = _tiny_benchmark(tmp_path)
    # GitHub-style: one top-level folder named after the repository and commit
    subprocess.run(
        [
            "tar",
            "-czf",
            str(served / "tiny.tar.gz"),
            "--transform",
            "s,^repo,tiny-main,",
            "--exclude=.git",
            "-C",
            str(tmp_path),
            "repo",
        ],
        check=True,
    )
    path = fetch.fetch(bench, f"{url}/tiny.tar.gz")
    assert (path / "maths" / "paper2code_test.py").is_file()
    # a changed archive is refused, the installed copy stays
    (repo / "pset" / "maths" / "stats.py").write_text("# changed\n")
    subprocess.run(
        ["tar", "-czf", str(served / "bad.tar.gz"), "--exclude=.git", "-C", str(tmp_path), "repo"],
        check=True,
    )
    with pytest.raises(fetch.FetchError, match="hash"):
        fetch.fetch(bench, f"{url}/bad.tar.gz", force=True)
    assert (path / fetch.VERIFIED).is_file()


def test_published_results_import_with_the_papers_numbers(
    shared: Path, published: Pset, tmp_path: Path
) -> None:
    models = import_results(shared / "overall_stats.json", tmp_path / "runs", pset=published)
    assert len(models) >= 20
    for m in models:
        assert m.weight_mismatches == 0
        o = m.summary.overall
        assert o is not None
        assert o.snippets == 212
        assert m.published_scaled is not None
        assert m.published_plain is not None
        assert abs(o.scaled - m.published_scaled) < 0.01, m.model
        assert abs(o.plain - m.published_plain) < 0.01, m.model
    best = max(models, key=lambda m: m.summary.overall.scaled if m.summary.overall else 0)
    assert best.model == "GEMINI_2_5_PRO_PREVIEW_05_06"
    assert best.summary.overall is not None
    assert round(best.summary.overall.scaled, 2) == 37.34
    assert round(best.summary.overall.plain, 2) == 64.15
    assert best.summary.overall.passed == 136
    assert best.summary.overall.passed_weight == 541


def _papers(pset: Pset, ids: tuple[str, ...]) -> Pset:
    return pset.model_copy(update={"papers": tuple(pset.paper(i) for i in ids)})


@pytest.fixture
def default_python(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run published papers with the default task interpreter (CI builds no environments)."""
    monkeypatch.setenv("RCB_TASK_PYTHON", str(TASK_PYTHON))
    return TASK_PYTHON


@pytest.mark.slow
def test_oracle_and_null_on_published_papers_with_the_default_interpreter(
    published: Pset, tmp_path: Path, default_python: Path, require_bwrap: None, shared: Path
) -> None:
    pset = _papers(published, DEFAULT_INTERPRETER_PAPERS)
    runs = {}
    for agent in ("oracle", "null"):
        cfg = EvalConfig(agent=agent, sandbox=SandboxConfig(backend="bwrap"))
        run_eval(pset, cfg, tmp_path / agent, jobs=2)
        runs[agent] = read_records(tmp_path / agent / "episodes.jsonl")
    n = len(pset.snippets)
    assert sum(1 for r in runs["oracle"] if r.passed) == n, [r.infra_error for r in runs["oracle"]][
        :2
    ]
    assert not any(r.status == "infra_error" for r in runs["oracle"] + runs["null"])
    assert sum(1 for r in runs["null"] if r.passed) == 0
    # the paper's models on the same snippets, through the same formulas
    import_results(shared / "overall_stats.json", tmp_path / "pub", pset=published)
    rows = compare([tmp_path / "oracle", tmp_path / "pub" / "imported-GPT_4_1"])
    assert rows[0].summary.overall is not None
    assert rows[0].summary.overall.scaled == 100.0
    assert rows[1].summary.overall is not None
    assert rows[1].summary.overall.snippets == n


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["openai:gpt-4.1", "anthropic:claude-sonnet-4-5"])
def test_the_tools_agent_solves_a_published_snippet_through_the_real_sdk(
    published: Pset, tmp_path: Path, default_python: Path, require_bwrap: None, spec: str
) -> None:
    paper = published.paper("minp")
    snippet = min(paper.snippets, key=lambda s: s.weight)
    pset = published.model_copy(
        update={"papers": (paper.model_copy(update={"snippets": (snippet,)}),)}
    )
    script = [
        Reply(tool_calls=(("read_file", {"path": snippet.file}),)),
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
            )
        ),
        Reply(tool_calls=(("run_tests", {}),)),
        Reply(tool_calls=(("submit", {}),)),
    ]
    with ScriptedModelServer(script) as server:
        cfg = EvalConfig(
            agent="tools",
            model=ModelConfig(
                spec=spec,
                base_url=server.openai_url if spec.startswith("openai") else server.url,
                retry=RetryPolicy(scale=0),
            ),
            sandbox=SandboxConfig(backend="bwrap"),
        )
        run_eval(pset, cfg, tmp_path / "run")
    (record,) = read_records(tmp_path / "run" / "episodes.jsonl")
    assert (record.status, record.passed, record.reward) == ("completed", True, snippet.weight)
    assert "tests PASSED" in record.steps[2].observation
    assert len(record.model_calls) == 4


@pytest.mark.slow
def test_the_leak_audit_of_the_published_set_is_clean_and_its_findings_classified(
    published: Pset, default_python: Path, require_bwrap: None
) -> None:
    factory = rcb_env.SandboxFactory(SandboxConfig(backend="bwrap"))
    try:
        findings = leak_audit.audit(published, factory)
        control = leak_audit.control(factory)
    finally:
        factory.close()
    leaks = [f for f in findings if f.accepted is None]
    assert leaks == [], leaks[:5]
    assert not any(leak_audit.is_generic(f.line) for f in findings)
    kinds = {(f.snippet_id.split("/")[0], f.kind) for f in findings}
    assert ("minp", "paper_text") in kinds
    assert any(f.path == leak_audit.CANARY_LEAK for f in control)


def test_the_runnable_set_and_both_denominators(tmp_path: Path) -> None:
    """A paper that cannot run here is left out and counted as not passed in the full rates."""
    ok = write_paper(tmp_path, "maths", math_files())
    broken = write_paper(tmp_path, "needs-net", math_files())
    write_pset(tmp_path, [ok, broken])
    (tmp_path / "needs-net" / "rcb-env.yaml").write_text("known_issue: downloads weights\n")
    pset = rcb_env.load(tmp_path)
    assert envs.availability(pset.paper("needs-net")).status == "unavailable"
    from rcb_env.testing import FakeBackend

    rcb_env.register_backend(FakeBackend)
    cfg = EvalConfig(
        agent="oracle",
        sandbox=SandboxConfig(backend="fake"),
        grading=GradingConfig(python=Path(sys.executable)),
    )
    summary = run_eval(pset, cfg, tmp_path / "run")
    assert summary.overall is not None
    assert summary.full is not None
    assert summary.totals is not None
    assert (summary.overall.snippets, summary.overall.scaled) == (3, 100.0)
    assert (summary.totals.snippets, summary.totals.weight) == (6, 2 * summary.overall.weight)
    assert summary.full.scaled == 50.0
    assert summary.full.plain == 50.0
    assert [u.paper for u in summary.totals.unavailable] == ["needs-net"]
    again = summarize_run(tmp_path / "run")
    assert again.full == summary.full
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["benchmark"]["unavailable"][0]["reason"] == "downloads weights"


ASSET_TEST = """\
import os
import unittest

from stats import mean


class TestWithAsset(unittest.TestCase):
    def test_reads_the_asset(self):
        with open(os.path.join(os.environ["DATA_HOME"], "weights", "table.txt")) as f:
            self.assertEqual(f.read(), "2.5\\n")
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)


if __name__ == "__main__":
    unittest.main()
"""


@pytest.fixture
def open_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh rcb-env home the sandbox user can traverse (as /opt/rcb-env is)."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="rcb-home-", dir="/tmp"))
    where.chmod(0o755)
    monkeypatch.setenv("RCB_ENV_HOME", str(where))
    yield where
    shutil.rmtree(where, ignore_errors=True)


def test_assets_are_fetched_verified_and_bound_read_only(
    tmp_path: Path, open_home: Path, http_root: tuple[str, Path], require_bwrap: None
) -> None:
    """A paper whose test needs a file it would download: setup fetches it once (verified) into
    a read-only cache that its sandboxes see, named by an environment variable."""
    import hashlib

    url, served = http_root
    (served / "table.txt").write_text("2.5\n")
    digest = hashlib.sha256(b"2.5\n").hexdigest()
    pset_root = tmp_path / "pset"
    write_pset(pset_root, [write_paper(pset_root, "maths", math_files(test=ASSET_TEST))])
    overlay = (
        f"assets:\n  - url: {url}/table.txt\n    sha256: {digest}\n    path: weights/table.txt\n"
        "env:\n  DATA_HOME: '{assets}'\n"
    )
    (pset_root / "maths" / "rcb-env.yaml").write_text(overlay)
    paper = rcb_env.load(pset_root).papers[0]
    assert envs.availability(paper).status == "unavailable"
    bad = paper.model_copy(
        update={
            "overlay": paper.overlay.model_copy(
                update={
                    "assets": (paper.overlay.assets[0].model_copy(update={"sha256": "0" * 64}),)
                }
            )
        }
    )
    with pytest.raises(envs.AssetError, match="nothing was installed"):
        envs.fetch_assets(bad)
    (report,) = envs.setup([paper], assets=True)
    assert report.ok
    assert envs.availability(paper).status == "ready"
    root = envs.asset_root(paper)
    assert (root / "weights" / "table.txt").read_text() == "2.5\n"
    pset = rcb_env.load(pset_root)
    cfg = EvalConfig(
        agent="oracle",
        sandbox=SandboxConfig(backend="bwrap", python=TASK_PYTHON),
        grading=GradingConfig(python=TASK_PYTHON),
    )
    summary = run_eval(pset, cfg, tmp_path / "run")
    assert summary.overall is not None
    assert summary.overall.scaled == 100.0
    # the episode's shell sees it too, read-only
    factory = rcb_env.SandboxFactory(SandboxConfig(backend="bwrap", python=TASK_PYTHON))
    try:
        with factory.create(paper, paper.snippets[0]) as sb:
            assert sb.exec('cat "$DATA_HOME/weights/table.txt"').stdout == "2.5\n"
            r = sb.exec('echo x > "$DATA_HOME/weights/table.txt"')
            assert r.exit_code != 0
    finally:
        factory.close()


def test_a_run_that_brings_its_own_interpreter_needs_no_task_environment(
    published: Pset, home: Path
) -> None:
    """In a fresh home no environment is built: bwrap runs would leave minp out, a Docker run
    (the image is its interpreter) would not."""
    minp = published.paper("minp")
    assert envs.availability(minp).status == "unavailable"
    assert "rcb-env setup" in envs.availability(minp).reason
    assert envs.availability(minp, interpreter_given=True).status == "ready"
    assert envs.availability(published.paper("REPA-E"), interpreter_given=True).status == (
        "unavailable"
    )
