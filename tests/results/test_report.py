"""The HTML report of real runs of the bundled tasks (oracle, null, a scripted-model tools agent)
opened in headless Chromium with no network: the leaderboard's rates, the plots' marks, a
failed cell opening its episode (diff and test results), the search narrowing the list, no
console errors. Screenshots go to the folder RCB_TEST_ARTIFACTS names (a temporary folder
without it) for a person to look at; never into the checkout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rcb_env import config
from rcb_env.grading import GradingConfig
from rcb_env.results import report
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.sandbox import SandboxConfig
from rcb_env.task import Pset, bundled_root, load
from rcb_env.task.selection import select_snippets
from tests import browser

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHARED_STATS = ROOT.parent / "shared" / "benchmarks" / "researchcodebench" / "overall_stats.json"
PAPERS = ("adamw-warmup", "rmsnorm-swiglu")
TOOLS = ("adamw-warmup/bias correction", "adamw-warmup/first moment", "adamw-warmup/second moment")


def _tasks() -> Pset:
    """Some snippets of two papers: a nested group (with the tools agent's three) and two more."""
    pset = load(bundled_root())
    keep = {"adamw step", "moment updates", *(i.split("/")[1] for i in TOOLS)}
    adamw = pset.paper(PAPERS[0])
    adamw = adamw.model_copy(
        update={"snippets": tuple(s for s in adamw.snippets if s.name in keep)}
    )
    other = pset.paper(PAPERS[1])
    other = other.model_copy(update={"snippets": other.snippets[:2]})
    return pset.model_copy(update={"papers": (adamw, other)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, require_bwrap: None) -> Path:
    """oracle and null on two bundled papers; the tools agent over the real openai SDK against
    the scripted server on three snippets: one solved after run_tests, one wrong, one submitted
    by body."""
    from rcb_agents.models import ModelConfig
    from rcb_agents.testing import Reply, ScriptedModelServer

    root = tmp_path_factory.mktemp("runs")
    sandbox = SandboxConfig(backend="bwrap", python=config.task_python())
    grading = GradingConfig(python=config.task_python(), timeout_s=60)
    for agent in ("oracle", "null"):
        cfg = EvalConfig(agent=agent, sandbox=sandbox, grading=grading)
        run_eval(_tasks(), cfg, root / agent, jobs=2)
    tasks = select_snippets(load(bundled_root()), TOOLS)
    a, b, c = (next(s for s in tasks.snippets if s.id == i) for i in TOOLS)
    plays = {  # the server answers in arrival order: the runner's order of the snippets
        a.id: [
            Reply(tool_calls=(("read_file", {"path": a.file}),)),
            Reply(
                tool_calls=(
                    (
                        "replace_in_file",
                        {"path": a.file, "old": a.todo_body(), "new": a.reference_body},
                    ),
                )
            ),
            Reply(tool_calls=(("run_tests", {}),)),
            Reply(tool_calls=(("submit", {}),)),
        ],
        b.id: [
            Reply(
                tool_calls=(
                    (
                        "replace_in_file",
                        {
                            "path": b.file,
                            "old": b.todo_body(),
                            "new": "        self.m = self.m * 0  # wrong\n",
                        },
                    ),
                )
            ),
            Reply(tool_calls=(("run_tests", {}),)),
            Reply(tool_calls=(("submit", {}),)),
        ],
        c.id: [Reply(tool_calls=(("submit", {"body": c.reference_body}),))],
    }
    script = [reply for s in tasks.snippets for reply in plays[s.id]]
    with ScriptedModelServer(script) as server:
        model = ModelConfig(spec="openai:scripted", base_url=server.openai_url)
        run_eval(tasks, EvalConfig(agent="tools", model=model, sandbox=sandbox, grading=grading),
                 root / "tools")  # fmt: skip
    return root


@pytest.fixture(scope="module")
def driver() -> Any:
    if not browser.available():
        if os.environ.get("CI"):
            pytest.fail("chromium and chromedriver must be installed in CI (scripts/install.sh)")
        pytest.skip("no chromium here")
    with browser.browser() as d:
        yield d


def _open(driver: Any, page: Path) -> None:
    driver.get(page.as_uri())
    deadline = time.monotonic() + 30
    while driver.execute_script("return document.body.getAttribute('data-ready')") != "1":
        assert time.monotonic() < deadline, browser.console_errors(driver)
        time.sleep(0.05)


def _rows(driver: Any) -> dict[str, dict[str, str]]:
    script = """
      const heads = [...document.querySelectorAll('#leaderboard thead th')]
        .map(t => t.textContent.replace(/ [▾▴]$/, ''));
      return [...document.querySelectorAll('#leaderboard tbody tr')].map(tr =>
        Object.fromEntries([...tr.children].map((td, i) => [heads[i], td.textContent])));
    """
    return {row["run"]: row for row in driver.execute_script(script)}


def _count(driver: Any, selector: str) -> int:
    n: int = driver.execute_script(f"return document.querySelectorAll({selector!r}).length")
    return n


_shots: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _screenshots(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where the screenshots go: RCB_TEST_ARTIFACTS/report, else a temporary folder."""
    named = os.environ.get("RCB_TEST_ARTIFACTS")
    folder = Path(named) / "report" if named else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    _shots[:] = [folder]


def _shot(driver: Any, name: str) -> None:
    path = _shots[0] / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 0, path


def test_the_report_of_real_runs_in_a_browser(runs: Path, driver: Any, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "rcb_env", "report", str(runs), "-o", str(page)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    _open(driver, page)
    _shot(driver, "leaderboard")
    # no resource was fetched: everything is in the page
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    rows = _rows(driver)
    assert rows["oracle"]["scaled % (runnable)"] == "100.00"
    assert rows["null"]["scaled % (runnable)"] == "0.00"
    # tools: bias correction (2 lines) and second moment (1) passed, first moment (1) failed
    assert rows["tools"]["scaled % (runnable)"] == "75.00"
    assert rows["tools"]["plain % (runnable)"] == "66.67"
    assert "not comparable" in rows["tools"]["agent"]  # another task set than the oracle's
    snippets = len(_tasks().snippets)
    assert rows["oracle"]["snippets"].startswith(str(snippets))
    # 95% intervals, the ranking and the statistically tied neighbours: oracle and null differ
    # on every paper; tools (3 snippets of one paper, its snippets resampled) differs from
    # neither at 5% (p = 16/27 against oracle, 2/27 against null)
    assert rows["oracle"]["scaled 95% CI"] == "[100.00, 100.00]"
    assert rows["null"]["plain 95% CI"] == "[0.00, 0.00]"
    low, high = map(float, rows["tools"]["scaled 95% CI"].strip("[]").split(", "))
    assert low <= 75.0 <= high
    assert low < high
    assert [rows[r]["rank"] for r in ("oracle", "tools", "null")] == ["1", "2", "3"]
    assert rows["oracle"]["tied with"] == "≈ #2"
    assert rows["tools"]["tied with"] == "≈ #1, #3"
    assert rows["null"]["tied with"] == "≈ #2"
    # sorting by a header reorders the rows
    driver.execute_script("document.querySelectorAll('#leaderboard thead th')[2].click()")
    first = driver.execute_script(
        "return document.querySelector('#leaderboard tbody tr td').textContent"
    )
    assert first == "null"  # ascending scaled rate now
    # plots: one bar per (paper, run) with a rate, one cell per (snippet, run), one dot per run
    assert _count(driver, "#plot-papers rect.bar") == 2 * len(PAPERS) + 1
    assert _count(driver, "#matrix rect.cell") == snippets * 3
    assert _count(driver, "#matrix rect.cell.passed") == snippets + 2
    assert _count(driver, "#plot-cost circle.dot") == 3
    weights = {s.weight for s in _tasks().snippets}
    edges = ((1, 1), (2, 3), (4, 7), (8, 15), (16, 10**9))
    bins = sum(any(lo <= w <= hi for w in weights) for lo, hi in edges)
    assert _count(driver, "#plot-length circle.pt") == 2 * bins + 2  # tools: 1 and 2-3 lines
    driver.execute_script("document.getElementById('matrix-section').scrollIntoView()")
    _shot(driver, "matrix")
    # the item view: every snippet by its solve rate over the runs, the hardest last
    assert _count(driver, "#items tbody tr.item") == snippets
    solve = driver.execute_script(
        "return [...document.querySelectorAll('#items tbody tr')].map(tr => "
        "[tr.dataset.snippet, parseFloat(tr.children[2].textContent)])"
    )
    assert [rate for _, rate in solve] == sorted((rate for _, rate in solve), reverse=True)
    assert solve[-1] == ["adamw-warmup/first moment", 33.3]  # oracle only, of three runs
    assert solve[0][1] == 66.7  # oracle and tools, not null
    assert "separate the runs" in driver.execute_script(
        "return document.getElementById('items-note').textContent"
    )
    driver.execute_script("document.getElementById('items-section').scrollIntoView()")
    _shot(driver, "items")
    # a failed cell of the tools run opens its episode: its diff and its test results
    tools = next(i for i, r in enumerate(json.loads(_data(driver))["runs"]) if r["id"] == "tools")
    driver.execute_script(
        "document.querySelector(`#matrix rect.cell.failed[data-run='${arguments[0]}']`)"
        ".dispatchEvent(new MouseEvent('click', {bubbles: true}))",
        tools,
    )
    _wait(driver, "!document.getElementById('viewer').hidden && document.getElementById('verdict')")
    title = driver.execute_script("return document.getElementById('viewer-title').textContent")
    assert "first moment" in title
    verdict = driver.execute_script("return document.getElementById('verdict').textContent")
    assert "ours: failed" in verdict
    assert "official rule: fail" in verdict
    assert _count(driver, "#viewer-body .diff .add") >= 1
    assert _count(driver, "#viewer-body .diff .del") >= 1
    assert _count(driver, "#test-results tr.test") >= 1
    assert _count(driver, "#test-results tr.test.failed") >= 1
    assert _count(driver, "#viewer-body .step.run-tests") == 1
    assert "scripted" in driver.execute_script(
        "return document.getElementById('viewer-body').textContent"
    )
    _shot(driver, "episode")
    driver.execute_script("document.getElementById('viewer-close').click()")
    # the search narrows the episode list; the filters too
    total = _count(driver, "#episode-list tbody tr")
    assert total == 2 * snippets + 3
    _type(driver, "f-search", "adamw-warmup/first moment")
    assert _count(driver, "#episode-list tbody tr") == 3  # oracle, null, tools
    _type(driver, "f-search", "")
    driver.execute_script(
        "const s = document.getElementById('f-outcome'); s.value = 'failed';"
        "s.dispatchEvent(new Event('change'))"
    )
    assert _count(driver, "#episode-list tbody tr") == snippets + 1  # null's and the wrong one
    driver.execute_script("document.getElementById('episodes-section').scrollIntoView()")
    _shot(driver, "episodes")
    assert browser.console_errors(driver) == []


def test_the_published_results_give_the_papers_rows_with_its_numbers(
    driver: Any, tmp_path: Path
) -> None:
    if not SHARED_STATS.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the published results must be beside the checkout in CI: {SHARED_STATS}")
        pytest.skip("no published results here")
    page = tmp_path / "published.html"
    done = subprocess.run(
        [sys.executable, "-m", "rcb_env", "report", "--published", str(SHARED_STATS),
         "-o", str(page)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads(SHARED_STATS.read_text())["overall_scores"]
    _open(driver, page)
    rows = _rows(driver)
    assert len(rows) == len(stats)
    for model, entry in stats.items():
        row = rows[f"imported-{model}"]
        # the page shows two decimals of the same number (rounding aside)
        assert abs(float(row["scaled % (full)"]) - entry["line_rates"]["mean"]) <= 0.0051, model
        assert abs(float(row["plain % (full)"]) - entry["task_rates"]["mean"]) <= 0.0051, model
        assert entry["llm_cfg"]["pretty_name"] in row["agent"]
    assert rows["imported-GEMINI_2_5_PRO_PREVIEW_05_06"]["scaled % (full)"] == "37.34"
    assert _count(driver, "#matrix rect.cell") == 212 * len(stats)
    for row in rows.values():  # every rate with its interval
        low, high = map(float, row["scaled 95% CI"].strip("[]").split(", "))
        assert low <= float(row["scaled % (runnable)"]) <= high
    # the two best are 3.80 points apart, p = 0.058 (paired, papers resampled): tied
    top = rows["imported-GEMINI_2_5_PRO_PREVIEW_05_06"]
    assert top["rank"] == "1"
    assert rows["imported-GEMINI_2_5_PRO_PREVIEW_03_25"]["rank"] == "2"
    assert "#2" in top["tied with"]
    assert _count(driver, "#items tbody tr.item") == 212
    _shot(driver, "published")
    assert browser.console_errors(driver) == []


def test_the_report_data_keeps_each_statement_once_and_clips_long_text(runs: Path) -> None:
    data = report.build([runs])
    statements = {ep["statement"] for ep in data["episodes"]}
    assert len(data["statements"]) == len(statements) == len(_tasks().snippets)
    assert all(len(s["observation"]) <= report.MAX_TEXT + 80
               for ep in data["episodes"] for s in ep["steps"])  # fmt: skip
    html = report.render(data)
    # nothing to fetch: no external script, style, image or link
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html


def _data(driver: Any) -> str:
    text: str = driver.execute_script("return document.getElementById('rcb-data').textContent")
    return text


def _wait(driver: Any, condition: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not driver.execute_script(f"return Boolean({condition})"):
        assert time.monotonic() < deadline, browser.console_errors(driver)
        time.sleep(0.05)


def _type(driver: Any, element_id: str, text: str) -> None:
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('input'))",
        element_id,
        text,
    )


def test_view_serves_the_report_on_loopback(runs: Path) -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rcb_env", "view", str(runs / "oracle"), "--no-open",
         "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    page = r.read().decode()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert 'id="rcb-data"' in page
        assert (
            json.loads(page.split('id="rcb-data">', 1)[1].split("</script>", 1)[0])["runs"][0]["id"]
            == "oracle"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
