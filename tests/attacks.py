"""The attacks a front door is tested with.

The whole attack suite (:data:`rcb_env.validation.hacks.ATTACKS`) is graded by `rcb-env hacks`
on bwrap and on Docker, warm against cold on both (tests/grading/test_reward_hacks.py and
tests/sandbox/test_warm.py). A front door (a rollout, the MCP server, eval) adds nothing to how a
body is
graded, only how it gets there: one attack of each way a submission could end differently there
(a verdict from the test results, a body reaching the answer, an ending the grader must not read
as infrastructure, a body that tries to make the host wait) shows that the door hands the body to
the same grading and scores what it returns.
"""

from __future__ import annotations

from rcb_env.validation.hacks import ATTACKS

FRONT_DOOR: dict[str, str] = {
    name: ATTACKS[name]
    for name in (
        "forge the runner's report",
        "read the reference by path: ../",
        "SIGKILL itself, to be excluded as an infrastructure kill",
        "import a missing module, to be excluded as a missing dependency",
        "leave a marker everywhere, pass where one is found (run 2)",
        "replace the report with a FIFO, a link or a huge file (hang the host)",
    )
}
