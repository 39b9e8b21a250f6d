"""rcb-env: research-code benchmark snippets as Gymnasium episodes for tool-using agents.

Importing this package has no side effects.
"""

from rcb_env.errors import (
    AnnotationError,
    ConfigError,
    DuplicateSnippetError,
    GradingError,
    MetadataError,
    MissingTaskFileError,
    RcbError,
    SandboxError,
    TaskLoadError,
)
from rcb_env.grading import FailureKind, Grader, GradeResult, GradingConfig, Outcome
from rcb_env.task import Paper, PaperMeta, Pset, Snippet, bundled_root, load

__all__ = [
    "AnnotationError",
    "ConfigError",
    "DuplicateSnippetError",
    "FailureKind",
    "GradeResult",
    "Grader",
    "GradingConfig",
    "GradingError",
    "MetadataError",
    "MissingTaskFileError",
    "Outcome",
    "Paper",
    "PaperMeta",
    "Pset",
    "RcbError",
    "SandboxError",
    "Snippet",
    "TaskLoadError",
    "bundled_root",
    "load",
]
__version__ = "0.1.0"
