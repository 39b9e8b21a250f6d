"""Runs inside the sandbox, under the paper's own interpreter (standard library only): which
lines of the named files does the paper's test execute?

``python coverage_probe.py TEST OUT FILE...``: runs ``TEST`` as ``__main__`` (the way
``python TEST`` would, from the paper folder) under a line tracer (:func:`sys.settrace`, and
:func:`threading.settrace` for the threads the test starts) that follows only frames whose code
lives in one of ``FILE...`` (paths relative to the working folder); every other frame is left
untraced, so the libraries the test calls run at full speed. Writes ``OUT`` as JSON:
``{"lines": {file: [line, ...]}, "exit": code}`` (1-based line numbers), whatever the test's
outcome (a test that raises still executed what it executed).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
from types import FrameType
from typing import Any

TraceFn = Any


def main() -> int:
    test, out, *files = sys.argv[1:]
    here = os.getcwd()
    wanted = {os.path.realpath(os.path.join(here, f)): f for f in files}
    seen: dict[str, set[int]] = {f: set() for f in files}

    def local(frame: FrameType, event: str, _arg: object) -> TraceFn:
        if event == "line":
            seen[wanted[frame.f_code.co_filename]].add(frame.f_lineno)
        return local

    def tracer(frame: FrameType, event: str, _arg: object) -> TraceFn:
        name = frame.f_code.co_filename
        if name not in wanted:
            real = os.path.realpath(name)
            if real not in wanted:
                return None
            wanted[name] = wanted[real]
        if event == "call":
            seen[wanted[name]].add(frame.f_lineno)
        return local

    sys.argv = [test]
    sys.path.insert(0, here)
    code = 0
    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        runpy.run_path(test, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        code = 1
    finally:
        sys.settrace(None)
        threading.settrace(None)
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"lines": {k: sorted(v) for k, v in seen.items()}, "exit": code}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
