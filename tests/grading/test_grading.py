"""Grading: fresh copies, per-test outcomes from our runner, and code-vs-environment verdicts."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rcb_env.execution import ExecResult
from rcb_env.grading import FailureKind, Grader, GradingConfig, Outcome, TestStatus, classify
from rcb_env.task import Paper, load
from rcb_env.task.discovery import expected_tests
from tests.conftest import (
    MATH_CODE,
    MATH_TEST,
    live_processes,
    local_grader,
    math_files,
    write_paper,
    write_pset,
)


def _paper(root: Path, **files: str) -> Paper:
    write_pset(root, [write_paper(root, "maths", math_files() | files)])
    return load(root).papers[0]


@pytest.fixture
def paper(math_pset: Path) -> Paper:
    return load(math_pset).papers[0]


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def test_reference_passes_with_per_test_outcomes(paper: Paper, grader: Grader) -> None:
    s = paper.snippet("variance")
    r = grader.grade(paper, s, s.reference_body)
    assert r.outcome is Outcome.PASSED, r
    assert r.official_pass
    assert r.exit_code == 0
    assert {t.name: t.status for t in r.tests} == {
        "TestStats.test_mean": TestStatus.PASSED,
        "TestStats.test_variance": TestStatus.PASSED,
    }
    assert r.snippet_id == "maths/variance"


def test_wrong_body_fails_and_names_the_failing_test(paper: Paper, grader: Grader) -> None:
    r = grader.grade(paper, paper.snippet("variance"), "    return 0.0\n")
    assert r.outcome is Outcome.FAILED
    assert r.kind is FailureKind.TEST_FAILURE
    statuses = {t.name: t.status for t in r.tests}
    assert statuses["TestStats.test_variance"] is TestStatus.FAILED
    assert statuses["TestStats.test_mean"] is TestStatus.PASSED
    assert not r.official_pass


def test_syntax_error_is_the_codes_fault(paper: Paper, grader: Grader) -> None:
    r = grader.grade(paper, paper.snippet("variance"), "    return (\n")
    assert (r.outcome, r.kind) == (Outcome.FAILED, FailureKind.LOAD_ERROR)
    assert "SyntaxError" in r.detail


def test_timeout_kills_the_run(paper: Paper, tmp_path: Path) -> None:
    g = local_grader(GradingConfig(python=Path(sys.executable), timeout_s=1.5), scratch=tmp_path)
    r = g.grade(paper, paper.snippet("variance"), "    import time\n    time.sleep(60)\n")
    assert (r.outcome, r.kind) == (Outcome.FAILED, FailureKind.TIMEOUT)
    assert r.timed_out
    assert r.duration_s < 20


def test_os_exit_zero_fools_the_official_rule_but_not_ours(paper: Paper, grader: Grader) -> None:
    r = grader.grade(paper, paper.snippet("variance"), "    import os\n    os._exit(0)\n")
    assert r.official_pass  # exit 0 and no error words: the published rule says "pass"
    assert (r.outcome, r.kind) == (Outcome.FAILED, FailureKind.EARLY_EXIT)


def test_sys_exit_inside_a_test_is_an_error(paper: Paper, grader: Grader) -> None:
    r = grader.grade(paper, paper.snippet("variance"), "    import sys\n    sys.exit(0)\n")
    assert r.outcome is Outcome.FAILED
    assert {t.name: t.status for t in r.tests}["TestStats.test_variance"] is TestStatus.ERROR


def test_skipping_from_the_snippet_does_not_pass(paper: Paper, grader: Grader) -> None:
    body = "    import unittest\n    raise unittest.SkipTest('nothing to see')\n"
    r = grader.grade(paper, paper.snippet("variance"), body)
    assert (r.outcome, r.kind) == (Outcome.FAILED, FailureKind.MISSING_TESTS)
    assert r.official_pass  # unittest exits 0 on skips


def test_missing_dependency_outside_the_snippet_is_infrastructure(tmp_path: Path) -> None:
    test = "import not_installed_anywhere_xyz\n" + MATH_TEST
    paper = _paper(tmp_path, **{"paper2code_test.py": test})
    g = local_grader(GradingConfig(python=Path(sys.executable)), scratch=tmp_path)
    s = paper.snippet("variance")
    for body in (s.reference_body, "    return 0\n"):
        r = g.grade(paper, s, body)
        assert (r.outcome, r.kind) == (Outcome.INFRA_ERROR, FailureKind.MISSING_DEPENDENCY), r
        assert "not_installed_anywhere_xyz" in r.detail


def test_import_error_is_the_candidates_when_the_pristine_paper_passes(
    paper: Paper, grader: Grader
) -> None:
    body = "    import not_installed_anywhere_xyz\n    return 1\n"
    r = grader.grade(paper, paper.snippet("variance"), body)
    assert r.outcome is Outcome.FAILED
    assert "pristine paper passes" in r.detail


def test_unstartable_interpreter_is_infrastructure(paper: Paper, tmp_path: Path) -> None:
    g = local_grader(GradingConfig(python=tmp_path / "no-python"), scratch=tmp_path)
    s = paper.snippet("mean")
    r = g.grade(paper, s, s.reference_body)
    assert r.outcome is Outcome.INFRA_ERROR
    assert r.kind is FailureKind.SANDBOX


def test_grading_copies_are_fresh_and_the_pristine_tree_is_untouched(
    paper: Paper, grader: Grader
) -> None:
    before = _tree_digest(paper.root)
    body = (
        "    open('planted.txt', 'w').write('x')\n"
        "    try:\n"
        "        open('stats_ref.py', 'a').write('\\nBROKEN = 1\\n')\n"
        "    except PermissionError:\n"
        "        pass  # refused in the grading run too; the copy must not matter anyway\n"
        "    return sum((x - mean(xs)) ** 2 for x in xs) / len(xs)\n"
    )
    s = paper.snippet("variance")
    assert grader.grade(paper, s, body).passed
    probe = "    import os\n    assert not os.path.exists('planted.txt')\n" + s.reference_body
    assert grader.grade(paper, s, probe).passed
    assert _tree_digest(paper.root) == before
    assert not list(grader.scratch.iterdir())  # copies removed


def test_processes_left_behind_are_killed(paper: Paper, grader: Grader) -> None:
    marker = "98765.4321"
    body = f"    import subprocess\n    subprocess.Popen(['sleep', '{marker}'])\n" + (
        paper.snippet("variance").reference_body
    )
    grader.grade(paper, paper.snippet("variance"), body)
    survivors = live_processes(marker)
    assert survivors == []


def test_official_rule_sees_error_words_beyond_the_kept_output(
    paper: Paper, tmp_path: Path
) -> None:
    g = local_grader(GradingConfig(python=Path(sys.executable), output_limit=200), scratch=tmp_path)
    body = (
        "    print('x' * 50000)\n    print('Exception: only in the middle')\n"
        "    print('y' * 50000)\n" + paper.snippet("variance").reference_body
    )
    r = g.grade(paper, paper.snippet("variance"), body)
    assert r.passed
    assert not r.official_pass
    assert "Exception: only" not in r.stdout
    assert "bytes omitted" in r.stdout


def test_script_style_test_files_are_graded_by_exit_and_completion(tmp_path: Path) -> None:
    script = (
        "from stats import mean, variance\n"
        "assert abs(variance([1, 2, 3, 4]) - 1.25) < 1e-9\n"
        "print('all good')\n"
    )
    paper = _paper(tmp_path, **{"paper2code_test.py": script})
    g = local_grader(GradingConfig(python=Path(sys.executable)), scratch=tmp_path)
    s = paper.snippet("variance")
    assert g.grade(paper, s, s.reference_body).passed
    r = g.grade(paper, s, "    return 0\n")
    assert (r.outcome, r.kind) == (Outcome.FAILED, FailureKind.LOAD_ERROR)


def test_parallel_gradings_do_not_interfere(paper: Paper, grader: Grader) -> None:
    s = paper.snippet("variance")
    bodies = [s.reference_body, "    return -1\n"] * 3
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda b: grader.grade(paper, s, b), bodies))
    assert [r.passed for r in results] == [True, False] * 3


# --- classification and static test discovery, without processes ------------------------------

_OK = ExecResult(exit_code=0)


def test_classify_runner_that_never_started_is_infrastructure() -> None:
    outcome, kind, _, _ = classify([], ExecResult(exit_code=127, stderr="no such file"), ())
    assert (outcome, kind) == (Outcome.INFRA_ERROR, FailureKind.RUNNER_CRASH)


def test_classify_signals() -> None:
    started = [{"event": "start"}]
    crash = classify(started, ExecResult(exit_code=None, signal=signal.SIGSEGV), ())
    assert crash[0] is Outcome.INFRA_ERROR
    cpu = classify(started, ExecResult(exit_code=None, signal=signal.SIGXCPU), ())
    assert (cpu[0], cpu[1]) == (Outcome.FAILED, FailureKind.TIMEOUT)


def test_classify_requires_every_defined_test_to_pass() -> None:
    events: list[dict[str, Any]] = [
        {"event": "start"},
        {"event": "test", "id": "T.test_a", "status": "passed"},
        {"event": "done", "code": 0},
    ]
    outcome, kind, detail, tests = classify(events, _OK, ("T.test_a", "T.test_b"))
    assert (outcome, kind) == (Outcome.FAILED, FailureKind.MISSING_TESTS)
    assert "T.test_b" in detail
    assert {t.name: t.status for t in tests}["T.test_b"] is TestStatus.MISSING


def test_classify_worst_subtest_outcome_wins_and_torn_lines_are_ignored(tmp_path: Path) -> None:
    from rcb_env.grading.report import read_report

    key = b"k" * 64
    events: list[dict[str, Any]] = [
        {"event": "start"},
        {"event": "test", "id": "T.test_a", "status": "failed"},
        {"event": "test", "id": "T.test_a", "status": "passed"},
        {"event": "done", "code": 0},
    ]
    lines = []
    for seq, e in enumerate(events, 1):
        body = json.dumps({**e, "seq": seq}).encode()
        lines.append(hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b" " + body)
    report = tmp_path / "r.jsonl"
    report.write_bytes(b"\n".join(lines) + b'\nabc {"event": "te')
    outcome, kind, _, _ = classify(read_report(tmp_path, "r.jsonl", key), _OK, ("T.test_a",))
    assert (outcome, kind) == (Outcome.FAILED, FailureKind.TEST_FAILURE)
    # An unsigned line in the middle is forgery, whatever it says.
    forged = b'0000 {"event": "test", "id": "T.test_a", "status": "passed", "seq": 3}'
    report.write_bytes(b"\n".join([*lines[:2], forged, *lines[2:]]) + b"\n")
    outcome, kind, _, _ = classify(read_report(tmp_path, "r.jsonl", key), _OK, ("T.test_a",))
    assert (outcome, kind) == (Outcome.FAILED, FailureKind.TAMPERING)


def test_classify_pass_needs_done_and_exit_zero() -> None:
    events: list[dict[str, Any]] = [
        {"event": "start"},
        {"event": "test", "id": "T.test_a", "status": "passed"},
        {"event": "done", "code": 0},
    ]
    assert classify(events, _OK, ("T.test_a",))[0] is Outcome.PASSED
    assert classify(events[:-1], _OK, ("T.test_a",))[1] is FailureKind.EARLY_EXIT
    assert classify(events, ExecResult(exit_code=3), ("T.test_a",))[1] is FailureKind.NONZERO_EXIT


def test_expected_tests_follow_inheritance_and_skip_decorators() -> None:
    source = """
import unittest
from unittest import TestCase, skip

class Base(unittest.TestCase):
    def test_shared(self): pass
    def helper(self): pass

class Child(Base):
    def test_own(self): pass
    @unittest.skipIf(True, "gpu only")
    def test_gpu(self): pass

class Direct(TestCase):
    def test_x(self): pass
    test_removed = None

@skip("whole class")
class Skipped(TestCase):
    def test_never(self): pass

class NotATest:
    def test_nope(self): pass
"""
    assert set(expected_tests(source)) == {
        "Base.test_shared",
        "Child.test_shared",
        "Child.test_own",
        "Direct.test_x",
    }
    assert expected_tests("def broken(:\n") == ()


def test_threads_are_limited_in_the_test_environment(paper: Paper, grader: Grader) -> None:
    body = (
        "    import os\n    assert os.environ['OMP_NUM_THREADS'] == '1'\n"
        "    assert 'RCB_SECRET_PROBE' not in os.environ\n"
        + paper.snippet("variance").reference_body
    )
    os.environ["RCB_SECRET_PROBE"] = "1"
    try:
        assert grader.grade(paper, paper.snippet("variance"), body).passed
    finally:
        del os.environ["RCB_SECRET_PROBE"]


LATE_IMPORT_TEST = """\
import unittest

from stats import variance


class TestStats(unittest.TestCase):
    def test_variance(self):
        from stats_ref import variance as variance_ref  # imported late, by the test itself

        self.assertAlmostEqual(variance([1, 2, 3, 4]), variance_ref([1, 2, 3, 4]))


if __name__ == "__main__":
    unittest.main()
"""


def test_the_guard_leaves_the_tests_and_honest_code_alone(tmp_path: Path) -> None:
    """Once the tests run, the reference and the test file are off the disk, a test can still
    import a reference late (from memory), and tested code may start programs."""
    paper = _paper(tmp_path, **{"paper2code_test.py": LATE_IMPORT_TEST})
    g = local_grader(
        GradingConfig(python=Path(sys.executable), timeout_s=30, candidate_policy=False),
        scratch=tmp_path,
    )
    s = paper.snippet("variance")
    body = (
        "    import os, subprocess\n"
        "    assert not os.path.exists('stats_ref.py')\n"
        "    assert not os.path.exists('paper2code_test.py')\n"
        "    subprocess.run(['true'], check=True)\n" + s.reference_body
    )
    r = g.grade(paper, s, body)
    assert r.passed, r.detail + r.stderr[-2000:]
    # ... while the candidate itself cannot import the reference late
    r = g.grade(paper, s, "    from stats_ref import variance as v\n    return v(xs)\n")
    assert (r.outcome, r.kind) == (Outcome.FAILED, FailureKind.TEST_FAILURE)
    assert "stats_ref is off limits to the code under test" in r.tests[0].message


@pytest.mark.parametrize(
    ("leak", "refusal"),
    [
        ('subprocess.run(["cat", "stats_ref.py"])', "may not start programs yet"),
        ('open("stats_ref.py").read()', "stats_ref.py is off limits"),
        ('open("/proc/self/cwd/paper2code_test.py").read()', "paper2code_test.py is off limits"),
        # moving the folder would move the files under the guard's check
        ('__import__("os").rename(".", "../elsewhere")', ". is off limits"),
    ],
)
def test_before_the_tests_run_tested_code_cannot_reach_the_answer(
    tmp_path: Path, leak: str, refusal: str
) -> None:
    """Module-level code runs while the test file imports it, when the reference and the test
    file are still on the disk: reading them or starting a program is refused."""
    code = MATH_CODE.replace(
        '"""Tiny maths library."""\n',
        f'"""Tiny maths library."""\nimport subprocess\n\nLEAK = {leak}\n',
    )
    paper = _paper(tmp_path, **{"stats.py": code})
    # The leak sits in the paper's own file, so the pristine paper fails too: score it anyway.
    cfg = GradingConfig(python=Path(sys.executable), timeout_s=30, require_pristine=False)
    g = local_grader(cfg, scratch=tmp_path)
    s = paper.snippet("variance")
    r = g.grade(paper, s, s.reference_body)
    assert r.outcome is Outcome.FAILED
    assert refusal in r.detail + r.stderr


GLOBALS_CODE = '''\
"""Functions that read module globals the tests set (the LEN pattern)."""
SCALE = None


def scaled(x):
    # <paper2code name="scaled">
    return SCALE * x
    # </paper2code name="scaled">
'''

GLOBALS_TEST = """\
import unittest

from lib import scaled
from lib_ref import scaled as scaled_ref


class TestScaled(unittest.TestCase):
    def setUp(self):
        import lib
        import lib_ref  # imported again: must be the module scaled_ref reads its globals from

        lib.SCALE = 3
        lib_ref.SCALE = 3

    def test_scaled(self):
        self.assertEqual(scaled(2), scaled_ref(2))


if __name__ == "__main__":
    unittest.main()
"""


def _globals_paper(root: Path, overlay: str | None = None) -> Paper:
    files = {
        "paper2code_paper.tex": "\\\\section{Scaling}\n",
        "paper2code_test.py": GLOBALS_TEST,
        "lib.py": GLOBALS_CODE,
        "lib_ref.py": "".join(
            line for line in GLOBALS_CODE.splitlines(keepends=True) if "paper2code" not in line
        ),
    }
    if overlay is not None:
        files["rcb-env.yaml"] = overlay
    write_pset(root, [write_paper(root, "globals", files, annotated="lib.py")])
    return load(root).papers[0]


def test_a_tests_late_import_of_a_reference_is_the_module_it_already_holds(
    tmp_path: Path,
) -> None:
    paper = _globals_paper(tmp_path)
    g = local_grader(GradingConfig(python=Path(sys.executable), timeout_s=30), scratch=tmp_path)
    s = paper.snippet("scaled")
    r = g.grade(paper, s, s.reference_body)
    assert r.passed, r.detail + r.stderr[-2000:]
    # the candidate still cannot get at the reference module
    r = g.grade(paper, s, "    import lib_ref\n    return lib_ref.scaled(x)\n")
    assert r.outcome is Outcome.FAILED
    assert "lib_ref is off limits to the code under test" in r.tests[0].message


VENDORED_TEST = """\
import unittest

from vendored import scaled as vendored_scaled
from lib import scaled


class TestScaled(unittest.TestCase):
    def setUp(self):
        import lib
        lib.SCALE = 3

    def test_scaled(self):
        import vendored.core  # the tests' own late import of the hidden package still works

        self.assertEqual(scaled(2), vendored_scaled(2))
        self.assertEqual(vendored.core.FACTOR, 3)


if __name__ == "__main__":
    unittest.main()
"""


def test_a_declared_hidden_package_is_guarded_like_a_reference(tmp_path: Path) -> None:
    """A paper that vendors a package holding the answer (schedule_free does): hidden from the
    agent by the overlay, imported by the tests, refused to the candidate."""
    write_pset(
        tmp_path,
        [
            write_paper(
                tmp_path,
                "vendors",
                {
                    "paper2code_paper.tex": "\\\\section{Scaling}\n",
                    "paper2code_test.py": VENDORED_TEST,
                    "lib.py": GLOBALS_CODE,
                    "vendored/__init__.py": "from vendored.core import scaled\n",
                    "vendored/core.py": "FACTOR = 3\n\n\ndef scaled(x):\n    return FACTOR * x\n",
                    "rcb-env.yaml": "hidden_paths: [vendored]\n",
                },
                annotated="lib.py",
            )
        ],
    )
    paper = load(tmp_path).papers[0]
    assert "vendored/core.py" in paper.hidden_paths
    g = local_grader(GradingConfig(python=Path(sys.executable), timeout_s=30), scratch=tmp_path)
    s = paper.snippet("scaled")
    r = g.grade(paper, s, s.reference_body)
    assert r.passed, r.detail + r.stderr[-2000:]
    for body in (
        "    import vendored\n    return vendored.scaled(x)\n",
        "    import vendored.core\n    return vendored.core.scaled(x)\n",
        "    return open('vendored/core.py').read()\n",
    ):
        r = g.grade(paper, s, body)
        assert r.outcome is Outcome.FAILED, body
        assert "off limits" in r.tests[0].message or "No such file" in r.tests[0].message, (
            body,
            r.tests[0].message,
        )


def test_the_runners_import_guard_costs_the_same_whatever_is_imported() -> None:
    """Once sealed, the runner checks every ``import`` statement for a reference module coming
    back; code that imports inside hot functions (torch does) must not pay per module loaded
    (it once made a published paper's 0.04 s of tests take 8 s)."""
    import sys
    import time
    import types

    from rcb_env.guest import runner as _runner

    def per_import(extra: int) -> float:
        names = [f"rcb_fake_module_{i}" for i in range(extra)]
        for n in names:
            sys.modules[n] = types.ModuleType(n)
        try:
            start = time.perf_counter()
            for _ in range(300):
                _runner._import("json")
            return time.perf_counter() - start
        finally:
            for n in names:
                sys.modules.pop(n, None)

    _runner._sealed[0] = True
    try:
        few, many = per_import(0), per_import(5_000)
    finally:
        _runner._sealed[0] = False
    assert many < 5 * few + 0.05, (few, many)
