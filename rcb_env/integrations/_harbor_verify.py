"""rcb-env's verdict inside a Harbor task's container: what an exported task's ``tests/test.sh``
runs (``rcb-env export harbor``, :mod:`rcb_env.integrations.harbor`). It runs under the paper's
own interpreter, so it imports only the standard library (like the grading runner beside it).

Usage: ``python verify.py TESTS_DIR WORKSPACE LOG_DIR``

It grades the FILE the agent edited, as rcb-env's grader does: the body is read back from the
edited file by aligning it with the masked one (the same rule as
:func:`rcb_env.task.regions.extract_span`), inserted into a fresh pristine copy of the paper
(``TESTS_DIR/paper``, which reaches the container only at verification time), and the paper's
test file runs under rcb-env's runner (``TESTS_DIR/rcb/runner.py``: per-test results on a signed
channel). The verdict follows the rules of :func:`rcb_env.grading.verdict.classify`; a failing
candidate is scored only once the pristine paper passes here (else the environment is broken).

It writes ``LOG_DIR/details.json`` (verdict, per-test results, the official harness's rule,
output tails) and, when the candidate was scored, ``LOG_DIR/reward.txt``: the snippet's line
weight on a pass, 0 on a failure. An infrastructure verdict writes no reward and exits 1, so
Harbor records a verifier error, never a reward of 0.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import hmac
import json
import os
import runpy
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any


def _policy() -> dict[str, Any]:
    """The candidate policy (:mod:`rcb_env.grading.policy`): shipped beside this file in the
    task (``tests/rcb/policy.py``); from the package when this file is imported from it."""
    folder = os.path.dirname(os.path.abspath(__file__))
    here = os.path.join(folder, "policy.py")
    if not os.path.exists(here):
        here = os.path.join(folder, "..", "grading", "policy.py")
    return runpy.run_path(here)


#: The runner's event names (``rcb_env.grading._runner``).
EV_START, EV_TEST, EV_DONE = "start", "test", "done"
EV_SCRIPT_ERROR, EV_TAMPER, EV_FORGED = "script_error", "tamper", "forged"
#: The official harness fails a run whose stdout or stderr contains any of these.
ERROR_WORDS = ("Error:", "Exception:", "Traceback", "failed")
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}
_RANK = {
    "passed": 0,
    "expected_failure": 0,
    "skipped": 1,
    "missing": 2,
    "unexpected_success": 3,
    "failed": 4,
    "error": 5,
}
_OUTPUT_LIMIT = 20_000


def split_lines(text: str) -> list[str]:
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def extract_span(masked_text: str, start: int, end: int, edited_text: str) -> tuple[str, bool]:
    """What now stands where lines ``start:end`` of ``masked_text`` stood, and whether the file
    was changed outside them (the rule of :func:`rcb_env.task.regions.extract_span`)."""
    masked = split_lines(masked_text)
    edited = split_lines(edited_text)
    mapping: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, masked, edited, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            mapping[block.a + k] = block.b + k
    before = [i for i in range(start) if i in mapping]
    after = [i for i in range(end, len(masked)) if i in mapping]
    lo = mapping[before[-1]] + 1 if before else 0
    hi = mapping[after[0]] if after else len(edited)
    hi = max(hi, lo)
    context = len(masked) - (end - start)
    outside = len(before) + len(after) != context or len(edited) - (hi - lo) != context
    return "".join(edited[lo:hi]), outside


def read_events(path: str, key: bytes) -> list[dict[str, Any]]:
    """The runner's events, verified (the rules of :func:`rcb_env.grading.report.read_report`):
    a line with a bad signature or out of sequence is someone else's writing."""
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            return [{"event": EV_FORGED, "why": "the report is not a regular file"}]
        with open(path, "rb") as f:
            raw = f.read(64 * 1024 * 1024 + 1)
    except FileNotFoundError:
        return []
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


def classify(
    events: list[dict[str, Any]], run: dict[str, Any], expected: list[str]
) -> tuple[str, str, str, list[dict[str, str]]]:
    """(outcome, kind, detail, tests) from the runner's events, the process's end and the static
    test list: the rules of :func:`rcb_env.grading.verdict.classify`."""
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
    tests = [{"name": n, "status": s, "message": m} for n, (s, m) in statuses.items()]

    def verdict(outcome: str, kind: str, detail: str) -> tuple[str, str, str, list[dict[str, str]]]:
        return outcome, kind, detail, tests

    exit_code = run["exit_code"]
    if tampering:
        return verdict("failed", "tampering", f"tampering: {tampering[0]}")
    if run["timed_out"]:
        return verdict("failed", "timeout", "killed at the wall-clock limit")
    if not started:
        return verdict(
            "infra_error",
            "runner_crash",
            f"the runner did not start (exit {exit_code}, signal {run['signal']}): "
            f"{run['stderr'].strip()[-300:]}",
        )
    killed_by = run["signal"]
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
            f"test process killed by signal {killed_by}, which the verifier did not send",
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
    bad = [t for t in tests if t["status"] in ("failed", "error", "unexpected_success")]
    if bad:
        names = ", ".join(t["name"] for t in bad[:5])
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


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    if len(text) <= _OUTPUT_LIMIT:
        return text
    half = _OUTPUT_LIMIT // 2
    return text[:half] + "\n[...]\n" + text[-half:]


def _remove(work: str) -> None:
    """Remove a grading copy, whatever the run left in it: ``rm`` walks a folder chain of any
    depth (``shutil.rmtree`` recurses, and a chain deeper than the recursion limit would end
    the verifier with no reward), follows no link and stays on one file system."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", work],
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
        )


def grade(tests_dir: str, spec: dict[str, Any], body: str) -> dict[str, Any]:
    """One grading run of ``body`` in a fresh copy of the pristine paper."""
    work = tempfile.mkdtemp(prefix="rcb-grade-")
    try:
        folder = os.path.join(work, "paper")
        shutil.copytree(os.path.join(tests_dir, "paper"), folder, symlinks=True)
        target = os.path.join(folder, spec["file"])
        with open(target, encoding="utf-8", newline="") as f:
            text = f.read()
        if body and not body.endswith("\n"):
            body += "\n"
        inserted = text.replace(spec["sentinel"], body, 1)
        with open(target, "w", encoding="utf-8", newline="") as f:
            f.write(inserted)
        lo, hi = _policy()["candidate_lines"](text, inserted)
        if body == spec["reference_body"]:
            lo, hi = 0, 0  # the reference is trusted
        rcb = os.path.join(work, "_rcb")
        os.mkdir(rcb)
        for name in ("runner.py", "keyrings.py", "policy.py"):
            shutil.copyfile(os.path.join(tests_dir, "rcb", name), os.path.join(rcb, name))
        key = secrets.token_hex(32).encode()
        with open(os.path.join(rcb, "key"), "wb") as f:
            f.write(key)
        guard = spec["guard"]
        with open(os.path.join(rcb, "protected"), "w", encoding="utf-8") as f:
            f.write(f"span\t{lo}\t{hi}\n")
            f.write("".join(f"{h}\n" for h in guard["removed"]))
            f.write("".join(f"keep\t{h}\n" for h in guard["kept"]))
            f.write("".join(f"option\t{o}\n" for o in guard["options"]))
        host = os.path.join(work, "_rcb_host")
        os.mkdir(host, 0o711)
        report = os.path.join(host, "report.jsonl")
        os.close(os.open(report, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o622))
        for sub in ("home", "tmp"):
            os.mkdir(os.path.join(work, sub))
        timeout = float(spec["timeout_s"])
        mb = 1024 * 1024
        argv = [
            sys.executable,
            os.path.join(rcb, "runner.py"),
            spec["test_file"],
            report,
            os.path.join(rcb, "key"),
            str(spec["memory_mb"] * mb),
            str(spec["file_size_mb"] * mb),
            str(int(timeout) + 5),
            spec["file"],
            os.path.join(rcb, "protected"),
        ]
        threads = "1"
        env = {
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.defpath]),
            "HOME": os.path.join(work, "home"),
            "TMPDIR": os.path.join(work, "tmp"),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "Agg",
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
        }
        env.update(spec["env"])
        started = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        duration = time.monotonic() - started
        code = proc.returncode
        run: dict[str, Any] = {
            "exit_code": None if code < 0 else code,
            "signal": -code if code < 0 and not timed_out else None,
            "timed_out": timed_out,
            "stdout": _tail(out),
            "stderr": _tail(err),
        }
        events = read_events(report, key)
        outcome, kind, detail, tests = classify(events, run, spec["expected_tests"])
        text = (out + err).decode("utf-8", "replace")
        official = code == 0 and not timed_out and not any(w in text for w in ERROR_WORDS)
        return {
            "outcome": outcome,
            "kind": kind,
            "detail": detail.replace(work, "/grading"),
            "official_pass": official,
            "tests": tests,
            "exit_code": run["exit_code"],
            "timed_out": timed_out,
            "duration_s": round(duration, 4),
            "stdout": run["stdout"].replace(work, "/grading"),
            "stderr": run["stderr"].replace(work, "/grading"),
        }
    finally:
        _remove(work)


def main(argv: list[str]) -> int:
    tests_dir, workspace, log_dir = argv[1], argv[2], argv[3]
    with open(os.path.join(tests_dir, "rcb", "spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    os.makedirs(log_dir, exist_ok=True)
    details: dict[str, Any] = {
        "snippet_id": spec["snippet_id"],
        "weight": spec["weight"],
        "file": spec["file"],
    }
    edited_path = os.path.join(workspace, spec["file"])
    try:
        with open(edited_path, encoding="utf-8", errors="replace", newline="") as f:
            edited = f.read()
    except OSError as exc:
        edited = None
        result: dict[str, Any] = {
            "outcome": "failed",
            "kind": "no_file",
            "detail": f"the edited file {spec['file']} cannot be read: {exc}",
            "official_pass": False,
            "tests": [],
        }
    if edited is not None:
        start, end = spec["placeholder_lines"]
        body, outside = extract_span(spec["masked_text"], start, end, edited)
        details["body"] = body
        details["edited_outside_region"] = outside
        findings = []
        if spec.get("policy", True) and body != spec["reference_body"]:
            with open(
                os.path.join(tests_dir, "paper", spec["file"]), encoding="utf-8", errors="replace"
            ) as f:
                findings = _policy()["check"](body, f.read(), spec["reference_body"])
        if findings:
            shown = "; ".join(str(x) for x in findings[:5])
            result = {
                "outcome": "failed",
                "kind": "policy",
                "detail": f"refused before running: the body {shown}",
                "official_pass": False,
                "tests": [],
            }
        else:
            result = grade(tests_dir, spec, body)
        if (
            result["outcome"] == "failed"
            and result["kind"] != "policy"
            and body != spec["reference_body"]
        ):
            health = grade(tests_dir, spec, spec["reference_body"])
            if health["outcome"] != "passed":
                result.update(
                    outcome="infra_error",
                    kind="reference_fails",
                    detail="the paper's own reference does not pass in this environment "
                    f"({health['kind']}: {health['detail'][:300]}), so a failing candidate is "
                    f"not scored here (the candidate: {result['detail'][:300]})",
                )
    details.update(result)
    passed = result["outcome"] == "passed"
    details["reward"] = spec["weight"] if passed else 0
    if result["outcome"] == "infra_error":
        details["reward"] = None
    with open(os.path.join(log_dir, "details.json"), "w", encoding="utf-8") as f:
        json.dump(details, f, indent=1)
    print(f"{spec['snippet_id']}: {result['outcome']} ({result['kind']}): {result['detail']}")
    if result["outcome"] == "infra_error":
        return 1
    with open(os.path.join(log_dir, "reward.txt"), "w", encoding="utf-8") as f:
        f.write(f"{details['reward']}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
