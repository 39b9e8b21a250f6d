"""rcb-env's verdict inside a Harbor task's container: what an exported task's ``tests/test.sh``
runs (``rcb-env export harbor``, :mod:`rcb_env.integrations.harbor`). It runs under the paper's
own interpreter, so it imports only the standard library (like the grading runner beside it).

Usage: ``python verify.py TESTS_DIR WORKSPACE LOG_DIR``

It grades the FILE the agent edited, as rcb-env's grader does: the body is read back from the
edited file by aligning it with the masked one (:func:`rcb_env.guest.protocol.extract_span`,
the host's rule), inserted into a fresh pristine copy of the paper
(``TESTS_DIR/paper``, which reaches the container only at verification time), and the paper's
test file runs under rcb-env's runner (``TESTS_DIR/rcb/runner.py``: per-test results on a signed
channel). The verdict rules are the host's (:func:`rcb_env.guest.protocol.classify`); a failing
candidate is scored only once the pristine paper passes here (else the environment is broken).

It writes ``LOG_DIR/reward-details.json`` (verdict, the per-test verdicts the runner
reported, the official harness's rule, output tails, the body) and, when the candidate was
scored, ``LOG_DIR/reward.json``: ``reward`` (the snippet's line weight on a pass, 0 on a
failure), ``weight`` and ``passed`` (1 or 0), what the dataset's metric
(:mod:`rcb_env.guest.rates`) needs for the paper's rates. An infrastructure verdict writes no
reward and exits 1, so Harbor records a verifier error, never a reward of 0.
"""

from __future__ import annotations

import contextlib
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


def _sibling(name: str) -> dict[str, Any]:
    """A guest module shipped beside this file in the task (``tests/rcb/<name>.py``): the
    candidate policy (:mod:`rcb_env.guest.policy`) and the grading protocol
    (:mod:`rcb_env.guest.protocol`: the event names, the report's reader, the verdict rules)."""
    return runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))


_protocol = _sibling("protocol")
EV_FORGED: str = _protocol["EV_FORGED"]
extract_span = _protocol["extract_span"]
classify = _protocol["classify"]
official_pass = _protocol["official_pass"]
_OUTPUT_LIMIT = 20_000
#: What Harbor reads as the trial's reward (a JSON object of numbers), and the verdict beside it
#: (Harbor's viewer shows ``reward-details.json``).
REWARD = "reward.json"
DETAILS = "reward-details.json"


def _policy() -> dict[str, Any]:
    return _sibling("policy")


def read_events(path: str, key: bytes) -> list[dict[str, Any]]:
    """The runner's events, verified (:func:`rcb_env.guest.protocol.parse_report`); a report
    that is not a regular file is someone else's doing."""
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            return [{"event": EV_FORGED, "why": "the report is not a regular file"}]
        with open(path, "rb") as f:
            raw = f.read(64 * 1024 * 1024 + 1)
    except FileNotFoundError:
        return []
    events: list[dict[str, Any]] = _protocol["parse_report"](raw, key)
    return events


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
        for name in ("runner.py", "keyrings.py", "policy.py"):  # what the runner needs
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
        return {
            "outcome": outcome,
            "kind": kind,
            "detail": detail.replace(work, "/grading"),
            "official_pass": official_pass(run["exit_code"], timed_out, text),
            "tests": [{"name": n, "status": s, "message": m} for n, s, m in tests],
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
    with open(os.path.join(log_dir, DETAILS), "w", encoding="utf-8") as f:
        json.dump(details, f, indent=1)
    print(f"{spec['snippet_id']}: {result['outcome']} ({result['kind']}): {result['detail']}")
    if result["outcome"] == "infra_error":
        return 1
    with open(os.path.join(log_dir, REWARD), "w", encoding="utf-8") as f:
        json.dump({"reward": details["reward"], "weight": spec["weight"], "passed": int(passed)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
