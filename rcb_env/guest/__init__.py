"""Stage: the code that runs *inside* the sandbox: the trust boundary, in one room.

Every module here runs under the task's interpreter (any Python the paper pins, without
rcb-env installed), so each imports the standard library only and is shipped as a file beside
the others it needs (:func:`source`, :func:`ship`):

- :mod:`.runner`, the grading runner, with :mod:`.policy` (the candidate policy) and
  :mod:`.keyrings` (the keyring guard);
- :mod:`.protocol`, the grading protocol both sides read: the event names, the signed report's
  reader, the verdict rules, how a body is read back from an edited file;
- :mod:`.warm_child`, the warm grading process;
- :mod:`.scanner` (the leak audit) and :mod:`.survivor_probe` (test strength);
- :mod:`.coverage_probe`, the lines a paper's test executes (``rcb-env synth``);
- :mod:`.harbor_verify`, the verifier of an exported Harbor task, and :mod:`.rates`, the
  paper's two rates (the host's summary uses them; an exported Harbor dataset runs them as its
  ``metric.py`` on Harbor's side, with whatever Python ``uv`` finds).

The host imports some of them too (the policy checks a body before a sandbox starts; the
verdict rules are the protocol's), never the other way round: nothing here imports
``rcb_env``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

_HERE = Path(__file__).resolve().parent

#: The files shipped into sandboxes, by name.
NAMES = (
    "runner",
    "policy",
    "keyrings",
    "protocol",
    "warm_child",
    "scanner",
    "survivor_probe",
    "harbor_verify",
    "rates",
    "coverage_probe",
)


def source(name: str) -> Path:
    """The file of guest module ``name`` (one of :data:`NAMES`), to copy into a sandbox."""
    if name not in NAMES:
        raise ValueError(f"no guest module {name!r} (there are: {', '.join(NAMES)})")
    return _HERE / f"{name}.py"


def text(name: str) -> str:
    """The source text of guest module ``name``."""
    return source(name).read_text(encoding="utf-8")


def ship(folder: Path, *names: str) -> None:
    """Copy guest modules ``names`` into ``folder`` under their own file names (how they import
    each other inside the sandbox)."""
    for name in names:
        shutil.copyfile(source(name), folder / f"{name}.py")
