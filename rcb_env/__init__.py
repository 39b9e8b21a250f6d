"""rcb-env: research-code benchmark snippets as Gymnasium episodes for tool-using agents.

Importing this package registers the bundled tasks' Gymnasium ids (``rcb/<paper>.<snippet>-v0``,
the id strings only: nothing is loaded until ``gym.make``), as Gymnasium packages do; it has no
other effect. The four contracts: :class:`TaskSource`, :class:`Backend` (with :class:`Sandbox`),
:class:`Agent`, :class:`EpisodeOutcome`.
"""

from rcb_env.agent import Agent, AgentFactory, MeteredAgent, OutOfBudget, ProgramAgent
from rcb_env.episode import (
    BudgetConfig,
    Budgets,
    EnvConfig,
    EpisodeConfig,
    RcbEnv,
    env_id,
    make_env,
    register_bundled,
)
from rcb_env.episode.outcome import EpisodeOutcome, EpisodeStatus, StopReason
from rcb_env.errors import (
    AgentFacingError,
    AnnotationError,
    ConfigError,
    DuplicateSnippetError,
    GradingError,
    InfraError,
    InfrastructureError,
    MetadataError,
    MissingTaskFileError,
    ModelError,
    RcbError,
    SandboxError,
    TaskLoadError,
)
from rcb_env.grading import FailureKind, Grader, GradeResult, GradingConfig, Outcome
from rcb_env.sandbox import Backend, Sandbox, SandboxConfig, SandboxFactory, register_backend
from rcb_env.task import Paper, PaperMeta, Pset, Snippet, bundled_root, load
from rcb_env.task.source import TaskSource, TaskStatement, register_source
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
    "Agent",
    "AgentFacingError",
    "AgentFactory",
    "AnnotationError",
    "Backend",
    "BudgetConfig",
    "Budgets",
    "ConfigError",
    "DuplicateSnippetError",
    "EnvConfig",
    "EpisodeConfig",
    "EpisodeOutcome",
    "EpisodeStatus",
    "FailureKind",
    "GradeResult",
    "Grader",
    "GradingConfig",
    "GradingError",
    "InfraError",
    "InfrastructureError",
    "ListFiles",
    "MetadataError",
    "MeteredAgent",
    "MissingTaskFileError",
    "ModelError",
    "OutOfBudget",
    "Outcome",
    "Paper",
    "PaperMeta",
    "ProgramAgent",
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
    "StopReason",
    "Submit",
    "TaskLoadError",
    "TaskSource",
    "TaskStatement",
    "ToolSpec",
    "WriteFile",
    "bundled_root",
    "env_id",
    "load",
    "make_env",
    "parse_action",
    "register_backend",
    "register_bundled",
    "register_source",
    "tool_specs",
]
__version__ = "0.1.0"

register_bundled()
