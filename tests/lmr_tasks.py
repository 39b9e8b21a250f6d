"""Small LMR-Bench-layout tasks of our own, written into a folder by the tests.

Same layout and quirks as the published benchmark (info.json with a string instance_id and no
folder_name, a unit_test_file name that does not exist, golden files that differ outside the
function and re-indent a class, a golden copy left in the repository, compiled files in
``__pycache__``, tests that catch their own assertion errors and log "Test Passed"/"Test Failed",
fixtures with expected outputs), in plain Python so any interpreter runs them.
"""

from __future__ import annotations

import json
from pathlib import Path

OPS_MASKED = '''\
"""Toy operations."""


def scaled_sum(xs, scale):
    """Sum of xs times scale."""
    # TODO: implement
    return None


def accumulate(xs):
    out = []
    total = 0
    for x in xs:
        # TODO: running total
        raise NotImplementedError
    return out


class Scaler:
  def __init__(self, factor):
    self.factor = factor

  def forward(self, xs):
    pass

  def describe(self):
    return f"Scaler({self.factor})"
'''

OPS_GOLDEN = '''\
"""Toy operations (golden)."""
import math


def scaled_sum(xs, scale):
    """Sum of xs times scale."""
    total = 0
    for x in xs:
        total += x
    return total * scale


def accumulate(xs):
    out = []
    total = 0
    for x in xs:
        total += x
        out.append(total)
    return out


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def forward(self, xs):
        # scale every element
        result = []
        for x in xs:
            result.append(x * self.factor)
        return result

    def describe(self):
        return f"Scaler({self.factor})"
'''

LOG_SETUP = """\
import logging
import unittest
from pathlib import Path

log_dir = Path(__file__).resolve().parent / 'logs'
log_dir.mkdir(parents=True, exist_ok=True)
log_file = log_dir / '{log}'
logging.basicConfig(filename=log_file, filemode="w", level=logging.INFO, format="%(message)s")
"""

TEST_1 = (
    LOG_SETUP.format(log="unit_test_1.log")
    + """
from toy.ops import scaled_sum


class TestScaledSum(unittest.TestCase):
    def test_values(self):
        try:
            self.assertEqual(scaled_sum([1, 2, 3], 2), 12)
            logging.info("test_values: Test Passed")
        except AssertionError as e:
            logging.info(f"test_values: Test Failed {e}")

    def test_empty(self):
        try:
            self.assertEqual(scaled_sum([], 5), 0)
            logging.info("test_empty: Test Passed")
        except AssertionError as e:
            logging.info(f"test_empty: Test Failed {e}")


if __name__ == "__main__":
    unittest.main()
"""
)

TEST_2 = (
    LOG_SETUP.format(log="unit_test_2.log")
    + """
import json

from toy.ops import Scaler


class TestScaler(unittest.TestCase):
    def setUp(self):
        with open("unit_test/scaler_io.json") as f:
            self.case = json.load(f)

    def test_forward(self):
        got = Scaler(self.case["factor"]).forward(self.case["input"])
        self.assertEqual(got, self.case["output"])
        logging.info("Test Passed")


if __name__ == "__main__":
    unittest.main()
"""
)

TEST_3 = (
    LOG_SETUP.format(log="unit_test_3.log")
    + """
from toy.ops import accumulate


class TestAccumulate(unittest.TestCase):
    def test_running_total(self):
        self.assertEqual(accumulate([1, 2, 3]), [1, 3, 6])
        logging.info("Test Passed")


if __name__ == "__main__":
    unittest.main()
"""
)

WEAK_MASKED = '''\
def helper(x):
    return x + 1


def target(x):
    """Twice x."""
    raise NotImplementedError


def neighbour(x):
    return helper(x) * 3
'''

WEAK_GOLDEN = '''\
def helper(x):
    return x + 1


def target(x):
    """Twice x."""
    return 2 * x


def neighbour(x):
    return helper(x) * 3
'''

WEAK_TEST_GOLDEN_IMPORT = (
    LOG_SETUP.format(log="unit_test_1.log")
    + """
import os
import sys

sys.path.append(os.path.join(os.path.dirname(__file__), "../../golden_files"))
from mod_golden import target


class TestTarget(unittest.TestCase):
    def test_target(self):
        self.assertEqual(target(4), 8)
        logging.info("Test Passed")


if __name__ == "__main__":
    unittest.main()
"""
)

WEAK_TEST_NEIGHBOUR = (
    LOG_SETUP.format(log="unit_test_2.log")
    + """
from mod import neighbour


class TestNeighbour(unittest.TestCase):
    def test_neighbour(self):
        self.assertEqual(neighbour(1), 6)
        logging.info("Test Passed")


if __name__ == "__main__":
    unittest.main()
"""
)


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def _info(impls: list[dict[str, object]], **extra: object) -> str:
    return json.dumps({**extra, "implementations": impls}, indent=4)


def write_toy(root: Path) -> Path:
    """``01-Toy``: three implementations (docstring + TODO + return, a partial mask inside a
    loop, a method masked with ``pass`` in a class the golden file re-indents)."""
    task = root / "01-Toy"
    repo = task / "toy-repo"
    impl = {
        "class_name": "",
        "golden_file": "golden_files/ops_golden.py",
        "goal_file": "toy/ops.py",
    }
    _write(
        task / "info.json",
        _info(
            [
                {
                    **impl,
                    "instruction": "Implement scaled_sum: the sum of xs times scale.",
                    "index": 1,
                    "goal_function": "scaled_sum",
                    "unit_test_file": "unit_test/unit_test_1.py",
                },
                {
                    **impl,
                    "instruction": "Implement Scaler.forward.",
                    "index": 2,
                    "goal_function": "forward",
                    "class_name": "Scaler",
                    "unit_test_file": "unit_test/test_wrong_name.py",
                },
                {
                    **impl,
                    "instruction": "Complete the running total in accumulate.",
                    "index": 3,
                    "goal_function": "accumulate",
                    "unit_test_file": "unit_test/unit_test_3.py",
                    "retrieval_context": [],
                },
            ],
            instance_id="1",
            paper_name="A Toy Paper",
            repo_folder_name="toy-repo",
        ),
    )
    _write(task / "golden_files" / "ops_golden.py", OPS_GOLDEN)
    _write(task / "Dockerfile", "FROM python:3.11\n")
    _write(repo / "toy" / "__init__.py", "")
    _write(repo / "toy" / "ops.py", OPS_MASKED)
    _write(repo / "toy" / "ops_backup.py", OPS_GOLDEN.replace("\n", "\r\n"))  # the answer
    _write(repo / "toy" / "__pycache__" / "ops_golden.cpython-311.pyc", b"\x00compiled golden")
    _write(repo / "README.md", "# toy repo\n")
    _write(repo / "requirements.txt", "numpy\n")  # what its Docker image installs
    _write(
        repo / "paper.json",
        json.dumps({"1": "Toy paper. We sum and scale.", "2": "Section 2: running totals."}),
    )
    _write(repo / "unit_test" / "unit_test_1.py", TEST_1)
    _write(repo / "unit_test" / "unit_test_2.py", TEST_2)
    _write(repo / "unit_test" / "unit_test_3.py", TEST_3)
    _write(
        repo / "unit_test" / "scaler_io.json",
        json.dumps({"factor": 3, "input": [1, 2], "output": [3, 6]}),
    )
    _write(repo / "unit_test" / "logs" / "unit_test_1.log", "test_values: Test Passed\n")
    return task


def write_weak(root: Path) -> Path:
    """``02-Weak``: a test that imports the golden file instead of the candidate, and one that
    tests a neighbour that never calls the masked function."""
    task = root / "02-Weak"
    repo = task / "weak-main"
    impl = {"class_name": "", "golden_file": "golden_files/mod_golden.py", "goal_file": "mod.py"}
    _write(
        task / "info.json",
        _info(
            [
                {
                    **impl,
                    "index": 1,
                    "goal_function": "target",
                    "unit_test_file": "unit_test/unit_test_1.py",
                },
                {
                    **impl,
                    "index": 1,
                    "goal_function": "target",
                    "unit_test_file": "unit_test/unit_test_2.py",
                },
            ],
            instance_id=2,
            folder_name="02-Weak",
            paper_name="Weak Tests",
            repo_folder_name="weak-main",
        ),
    )
    _write(task / "golden_files" / "mod_golden.py", WEAK_GOLDEN)
    _write(repo / "mod.py", WEAK_MASKED)
    _write(repo / "paper.json", json.dumps({"1": "Twice."}))
    _write(repo / "unit_test" / "unit_test_1.py", WEAK_TEST_GOLDEN_IMPORT)
    _write(repo / "unit_test" / "unit_test_2.py", WEAK_TEST_NEIGHBOUR)
    return task


def write_benchmark(root: Path) -> Path:
    """Both tasks under ``root`` (a ``benchmark/``-like folder)."""
    root.mkdir(parents=True, exist_ok=True)
    write_toy(root)
    write_weak(root)
    return root


#: Bodies for the toy's implementations (the right answer, at the masked file's indentation).
TOY_RIGHT = {
    "1-scaled_sum": "    return sum(xs) * scale\n",
    "2-forward": "    return [x * self.factor for x in xs]\n",
    "3-accumulate": "        total += x\n        out.append(total)\n",
}

#: scaled_sum wrong in a way only the exit status and unittest see: the error is not an
#: AssertionError, so the test's own try/except does not log it; the empty case logs "Passed".
#: The official rule (>= 1 "Passed", no "Failed" in the log) passes it.
WRONG_OFFICIAL_PASSES = (
    "    if not xs:\n        return 0\n    raise ValueError('only the empty case')\n"
)
