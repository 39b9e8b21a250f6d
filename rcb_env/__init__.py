"""rcb-env: research-code benchmark snippets as Gymnasium episodes for tool-using agents.

Importing this package registers the bundled tasks' Gymnasium ids (``rcb/<paper>.<snippet>-v0``),
as Gymnasium packages do; it has no other effect.
"""

from rcb_env.episode import Budgets, EnvConfig, RcbEnv, env_id, make_env, register_bundled
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
from rcb_env.sandbox import Sandbox, SandboxConfig, SandboxFactory
from rcb_env.task import Paper, PaperMeta, Pset, Snippet, bundled_root, load
from rcb_env.tools.actions import (
    Action,
    ActionError,
    ListFiles,
    ReadFile,
    ReadPaper,
    ReplaceInFile,
    RunCommand,
    RunTests,
    Search,
    Submit,
    ToolSpec,
    WriteFile,
    parse_action,
    tool_specs,
)

__all__ = [
    "Action",
    "ActionError",
    "AnnotationError",
    "Budgets",
    "ConfigError",
    "DuplicateSnippetError",
    "EnvConfig",
    "FailureKind",
    "GradeResult",
    "Grader",
    "GradingConfig",
    "GradingError",
    "ListFiles",
    "MetadataError",
    "MissingTaskFileError",
    "Outcome",
    "Paper",
    "PaperMeta",
    "Pset",
    "RcbEnv",
    "RcbError",
    "ReadFile",
    "ReadPaper",
    "ReplaceInFile",
    "RunCommand",
    "RunTests",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxFactory",
    "Search",
    "Snippet",
    "Submit",
    "TaskLoadError",
    "ToolSpec",
    "WriteFile",
    "bundled_root",
    "env_id",
    "load",
    "make_env",
    "parse_action",
    "register_bundled",
    "tool_specs",
]
__version__ = "0.1.0"

register_bundled()
