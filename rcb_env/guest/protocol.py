"""The grading protocol, written once for both sides of the sandbox: the signed report's event
names and its reader, the verdict rules, the official harness's rule, and how a candidate body
is read back from an edited file.

Standard library only, and plain values only (strings, dicts, tuples): the host wraps the
verdict in its types (:func:`rcb_env.grading.verdict.classify`, :func:`rcb_env.grading.report.
read_report`, :func:`rcb_env.task.regions.extract_span`), and the verifier of an exported
Harbor task (:mod:`.harbor_verify`) runs this file as shipped beside it. So a verdict rule
cannot differ between ``rcb-env eval`` and an exported task.

The writer of the events is the grading runner (:mod:`.runner`), which keeps its own copy of
the event names: it runs before and around untrusted code and loads nothing after it starts
(a test holds the two equal).
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import json
import signal
from typing import Any

__all__ = [
    "ERROR_WORDS",
    "EV_DONE",
    "EV_FORGED",
    "EV_MAIN_DONE",
    "EV_SCRIPT_ERROR",
    "EV_START",
    "EV_TAMPER",
    "EV_TEST",
    "classify",
    "extract_span",
    "official_pass",
    "parse_report",
    "split_lines",
]

# The signed report's events (written by the runner).
EV_START = "start"
EV_TEST = "test"
EV_TAMPER = "tamper"
EV_MAIN_DONE = "main_done"
EV_SCRIPT_ERROR = "script_error"
EV_DONE = "done"
#: Not written by the runner: a line whose signature or sequence number is wrong.
EV_FORGED = "forged"

#: The official harness fails a run whose stdout or stderr contains any of these.
ERROR_WORDS = ("Error:", "Exception:", "Traceback", "failed")

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}
#: How bad a test's status is: a test reported twice keeps the worse one.
_RANK = {
    "passed": 0,
    "expected_failure": 0,
    "skipped": 1,
    "missing": 2,
    "unexpected_success": 3,
    "failed": 4,
    "error": 5,
}

#: (outcome, failure kind, detail, tests as (name, status, message)).
Verdict = tuple[str, str, str, list[tuple[str, str, str]]]


def parse_report(raw: bytes, key: bytes) -> list[dict[str, Any]]:
    """The runner's events from the report's bytes, verified. Each line is ``<hmac> <json>``
    with a sequence number. A torn last line (the process killed mid-write) is dropped; a line
    with a bad signature, or out of sequence, is someone else's writing and becomes a
    ``forged`` event."""
    events: list[dict[str, Any]] = []
    lines = raw.split(b"\n")
    expected = 1
    for i, line in enumerate(lines):
        if not line:
            continue
        mac, _, body = line.partition(b" ")
        good = hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).hexdigest().encode())
        event: Any = None
        if good:
            try:
                event = json.loads(body)
            except ValueError:
                event = None
        if not good or not isinstance(event, dict) or event.get("seq") != expected:
            if i == len(lines) - 1 and not raw.endswith(b"\n"):
                break  # torn by a kill
            events.append({"event": EV_FORGED, "line": line[:200].decode("utf-8", "replace")})
            continue
        expected += 1
        events.append(event)
    return events


def official_pass(exit_code: int | None, timed_out: bool, output: str) -> bool:
    """The published harness's rule: exit 0, in time, and no error word in the output."""
    return exit_code == 0 and not timed_out and not any(w in output for w in ERROR_WORDS)


def signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return f"signal {number}"


def classify(events: list[dict[str, Any]], run: dict[str, Any], expected: list[str]) -> Verdict:
    """The verdict from the runner's events, the process's end and the static test list.

    ``run``: ``exit_code`` (None when killed), ``signal``, ``timed_out``, ``stderr``, and,
    where the sandbox can tell, ``oom_killed`` (its own memory limit) and ``host_oom`` (the
    host's OOM killer, the limit not reached). A failed test is a result; a broken environment
    (the runner never started, a kill nobody sent, a missing dependency) is not.
    """
    statuses: dict[str, tuple[str, str]] = {}
    import_failures: list[str] = []
    script_error: dict[str, Any] | None = None
    started = done = False
    tampering: list[str] = []
    for e in events:
        kind = e.get("event")
        if kind == EV_FORGED:
            tampering.append(str(e.get("why") or "a report line not written by the runner"))
        elif kind == EV_TAMPER:
            tampering.append(f"{', '.join(e.get('what', []))[:300]} changed ({e.get('where')})")
        elif kind == EV_START:
            started = True
        elif kind == EV_DONE:
            done = True
        elif kind == EV_TEST:
            status = str(e.get("status"))
            if status not in _RANK:
                continue
            name = str(e.get("id"))
            previous = statuses.get(name)
            if previous is None or _RANK[status] >= _RANK[previous[0]]:
                statuses[name] = (status, str(e.get("message", ""))[-2000:])
            if e.get("exc_type") in _IMPORT_ERRORS:
                import_failures.append(str(e.get("import_name") or e.get("message", ""))[:200])
        elif kind == EV_SCRIPT_ERROR:
            script_error = e
            if e.get("exc_type") in _IMPORT_ERRORS:
                import_failures.append(str(e.get("import_name") or e.get("message", ""))[:200])
    for name in expected:
        statuses.setdefault(name, ("missing", ""))
    tests = [(n, s, m) for n, (s, m) in statuses.items()]

    def verdict(outcome: str, kind: str, detail: str) -> Verdict:
        return outcome, kind, detail, tests

    exit_code = run.get("exit_code")
    if tampering:
        return verdict("failed", "tampering", f"tampering: {tampering[0]}")
    if run.get("timed_out"):
        return verdict("failed", "timeout", "killed at the wall-clock limit")
    if not started:
        if run.get("host_oom"):  # the host's OOM killer, before the runner could start
            return verdict(
                "infra_error",
                "host_oom",
                "killed by the kernel's OOM killer before the runner started, although the "
                "sandbox's memory limit was not reached: memory ran out outside the sandbox",
            )
        return verdict(
            "infra_error",
            "runner_crash",
            f"the runner did not start (exit {exit_code}, signal {run.get('signal')}): "
            f"{str(run.get('stderr', '')).strip()[-300:]}",
        )
    if run.get("oom_killed"):
        return verdict(
            "failed",
            "memory_limit",
            "the sandbox's memory limit was reached; the kernel killed the test process",
        )
    if run.get("host_oom"):
        return verdict(
            "infra_error",
            "host_oom",
            "killed by the kernel's OOM killer although the sandbox's memory limit was not "
            "reached: memory ran out outside the sandbox",
        )
    # Sandboxes report a killed child as exit status 128 + signal (bwrap, docker).
    killed_by = run.get("signal")
    if killed_by is None and not done and exit_code is not None and 128 < exit_code < 160:
        killed_by = exit_code - 128
    if killed_by is not None:
        if killed_by == signal.SIGXCPU:
            return verdict("failed", "timeout", "CPU-time limit exceeded")
        if killed_by == signal.SIGXFSZ:
            return verdict("failed", "early_exit", "file-size limit exceeded")
        return verdict(
            "infra_error",
            "killed",
            f"test process killed by {signal_name(killed_by)}, which neither rcb-env nor the "
            "sandbox's limits sent",
        )
    if import_failures:
        return verdict("infra_error", "missing_dependency", f"import failed: {import_failures[0]}")
    if script_error is not None:
        msg = str(script_error.get("message", "")).strip().splitlines()
        return verdict(
            "failed",
            "load_error",
            f"{script_error.get('exc_type')} before the tests finished: {msg[-1] if msg else ''}",
        )
    if not done:
        return verdict("failed", "early_exit", "process exited before the tests finished")
    bad = [t for t in tests if t[1] in ("failed", "error", "unexpected_success")]
    if bad:
        names = ", ".join(t[0] for t in bad[:5])
        return verdict(
            "failed", "test_failure", f"{len(bad)} of {len(tests)} tests failed: {names}"
        )
    unpassed = [n for n in expected if statuses[n][0] not in ("passed", "expected_failure")]
    if unpassed:
        return verdict(
            "failed",
            "missing_tests",
            f"{len(unpassed)} defined tests did not pass: " + ", ".join(unpassed[:5]),
        )
    if exit_code != 0:
        return verdict("failed", "nonzero_exit", f"exit status {exit_code}")
    return verdict("passed", "none", f"{len(tests)} tests passed")


def split_lines(text: str) -> list[str]:
    """``text`` as lines that keep their ``\\n`` (only ``\\n`` ends a line: a lone ``\\r`` is
    part of one, as Python's own parser reads a file opened with ``newline=""``)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def extract_span(masked_text: str, start: int, end: int, edited_text: str) -> tuple[str, bool]:
    """What now stands where lines ``start:end`` (0-based, end exclusive; may be empty) stood in
    ``masked_text``, and whether the file was also changed outside them (such edits are ignored
    for grading). Lines are aligned with difflib; the body is everything between the last
    unchanged line before the span and the first unchanged line after it. A line whose only
    change is trailing whitespace counts as unchanged (an editor, or an agent CLI's write tool,
    may strip it from the whole file: Claude Code's does, measured)."""
    masked = split_lines(masked_text)
    edited = split_lines(edited_text)
    mapping: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(
        None, [x.rstrip() for x in masked], [x.rstrip() for x in edited], autojunk=False
    )
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            mapping[block.a + k] = block.b + k
    before = [i for i in range(start) if i in mapping]
    after = [i for i in range(end, len(masked)) if i in mapping]
    lo = mapping[before[-1]] + 1 if before else 0
    hi = mapping[after[0]] if after else len(edited)
    hi = max(hi, lo)
    # Untouched context maps line for line; a changed, deleted or added line outside the span
    # breaks either count.
    context = len(masked) - (end - start)
    outside = len(before) + len(after) != context or len(edited) - (hi - lo) != context
    return "".join(edited[lo:hi]), outside
