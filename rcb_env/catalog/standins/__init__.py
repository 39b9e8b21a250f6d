"""Stand-ins: tiny packages of rcb-env's own for packages a benchmark's code imports but that
cannot be installed here. Each says what it is and raises if anything beyond the import is used;
``rcb-env setup`` installs the ones a paper's overlay names into that paper's environment."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The stand-in package folder ``name``."""
    return ROOT / name
