"""Stage: task validation (model-free)."""

from rcb_env.validation.validate import (
    PaperReport,
    SnippetReport,
    Status,
    ValidationReport,
    planned_runs,
    validate,
)

__all__ = [
    "PaperReport",
    "SnippetReport",
    "Status",
    "ValidationReport",
    "planned_runs",
    "validate",
]
