"""Stage 1, task loading: the published format read into frozen specs."""

from rcb_env.task.loader import bundled_root, load, load_paper, load_pset
from rcb_env.task.models import (
    AnnotatedFile,
    LoadFailure,
    Overlay,
    Paper,
    PaperMeta,
    Pset,
    Snippet,
)

__all__ = [
    "AnnotatedFile",
    "LoadFailure",
    "Overlay",
    "Paper",
    "PaperMeta",
    "Pset",
    "Snippet",
    "bundled_root",
    "load",
    "load_paper",
    "load_pset",
]
