"""The agent's actions: one typed model per tool. Tool schemas for any model API are generated
from these definitions (the class docstring is the tool's description, each field's docstring its
parameter description); nothing is written twice."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from rcb_env.errors import AgentFacingError

#: Largest serialized action accepted (a model's runaway output is an error, not a hang).
MAX_ACTION_BYTES = 1_000_000


class ActionError(AgentFacingError):
    """The action could not be parsed or validated; goes back to the agent as an observation."""


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ListFiles(_Action):
    """List the files of the workspace (the paper's repository with the snippet masked)."""

    tool: Literal["list_files"] = "list_files"
    path: str = "."
    """Folder (or file) to list, relative to the workspace root."""


class ReadFile(_Action):
    """Read a text file of the workspace, with line numbers; optionally only a line range."""

    tool: Literal["read_file"] = "read_file"
    path: str
    """File to read, relative to the workspace root."""
    start_line: int | None = Field(default=None, ge=1)
    """First line to show (1-based, inclusive)."""
    end_line: int | None = Field(default=None, ge=1)
    """Last line to show (1-based, inclusive)."""


class Search(_Action):
    """Search the workspace's text files with a Python regular expression."""

    tool: Literal["search"] = "search"
    pattern: str = Field(min_length=1)
    """Regular expression matched against each line."""
    path: str = "."
    """Folder or file to search in."""
    glob: str | None = None
    """Only files whose path matches this glob, e.g. ``*.py``."""


class ReplaceInFile(_Action):
    """Replace one exact, unique occurrence of a string in a file."""

    tool: Literal["replace_in_file"] = "replace_in_file"
    path: str
    """File to edit."""
    old: str = Field(min_length=1)
    """Exact text to replace; must occur exactly once in the file."""
    new: str
    """Replacement text."""


class WriteFile(_Action):
    """Create or overwrite a file with the given content."""

    tool: Literal["write_file"] = "write_file"
    path: str
    """File to write, relative to the workspace root."""
    content: str
    """The file's full new content."""


class RunCommand(_Action):
    """Run a shell command in the sandbox (workspace as working folder, no network). The shell
    persists between commands: the working folder and variables carry over."""

    tool: Literal["run_command"] = "run_command"
    command: str = Field(min_length=1)
    """The command line (bash)."""
    timeout_s: float | None = Field(default=None, gt=0)
    """Seconds before the command is killed (capped by the environment)."""


class RunTests(_Action):
    """Run the paper's hidden tests against your current implementation of the masked block, in a
    fresh copy of the original repository. What you learn depends on the environment's feedback
    setting."""

    tool: Literal["run_tests"] = "run_tests"


class ReadPaper(_Action):
    """Read the paper: its outline, one section (by heading), or all of it (LaTeX as written)."""

    tool: Literal["read_paper"] = "read_paper"
    section: str | None = None
    """Heading (or part of one) of the section to read; ``outline`` lists the headings; omit for
    the whole paper."""


class Submit(_Action):
    """Finish: grade the masked block as it now stands in the workspace, or the given body."""

    tool: Literal["submit"] = "submit"
    body: str | None = None
    """Optional code to grade instead of the workspace's block (indented as in the file)."""


Action = Annotated[
    ListFiles
    | ReadFile
    | Search
    | ReplaceInFile
    | WriteFile
    | RunCommand
    | RunTests
    | ReadPaper
    | Submit,
    Field(discriminator="tool"),
]
ACTION_TYPES: tuple[type[_Action], ...] = (
    ListFiles,
    ReadFile,
    Search,
    ReplaceInFile,
    WriteFile,
    RunCommand,
    RunTests,
    ReadPaper,
    Submit,
)
_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)


def parse_action(raw: object) -> Action:
    """An action from a typed model, a dict, or a JSON string (e.g. a model's raw tool call).

    Raises:
        ActionError: malformed JSON, unknown tool, wrong or missing arguments, too large.
    """
    if isinstance(raw, ACTION_TYPES):
        return raw  # type: ignore[return-value]
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).decode("utf-8", "replace")
    if isinstance(raw, str):
        if len(raw) > MAX_ACTION_BYTES:
            raise ActionError(f"action is {len(raw)} characters; the limit is {MAX_ACTION_BYTES}")
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ActionError(
                f"action is not valid JSON: {exc.msg} at position {exc.pos}"
            ) from None
    if not isinstance(raw, dict):
        raise ActionError(f"action must be an object with a 'tool' field, not {type(raw).__name__}")
    try:
        size = len(json.dumps(raw, default=str))
    except (TypeError, ValueError) as exc:
        raise ActionError(f"action is not serializable: {exc}") from None
    if size > MAX_ACTION_BYTES:
        raise ActionError(f"action is {size} characters; the limit is {MAX_ACTION_BYTES}")
    tool = raw.get("tool")
    names = tool_names()
    if tool not in names:
        raise ActionError(f"unknown tool {tool!r}; available: {', '.join(names)}")
    try:
        return _ADAPTER.validate_python(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'action'}: {e['msg']}"
            for e in exc.errors()
        )
        raise ActionError(f"invalid arguments for {tool}: {problems}") from None


def tool_names() -> list[str]:
    return [t.model_fields["tool"].default for t in ACTION_TYPES]


class ToolSpec(BaseModel):
    """A provider-neutral tool definition: name, description, JSON-schema parameters."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    schema = dict(schema)
    schema.pop("title", None)
    schema.pop("description", None)  # the tool's own description carries it
    if "properties" in schema:
        props = {}
        for name, raw in schema["properties"].items():
            prop = {k: v for k, v in raw.items() if k != "title"}
            if "anyOf" in prop:  # Optional[X] -> X (absence means None)
                options = [o for o in prop["anyOf"] if o.get("type") != "null"]
                if len(options) == 1:
                    prop = {**{k: v for k, v in prop.items() if k != "anyOf"}, **options[0]}
            if prop.get("default", "missing") is None:
                prop.pop("default")
            props[name] = prop
        schema["properties"] = props
    return schema


def tool_specs() -> list[ToolSpec]:
    """One spec per tool, generated from the action models."""
    specs = []
    for t in ACTION_TYPES:
        schema = _clean(t.model_json_schema())
        schema["properties"].pop("tool")
        schema["required"] = [r for r in schema.get("required", []) if r != "tool"]
        schema["additionalProperties"] = False
        name = t.model_fields["tool"].default
        description = " ".join((t.__doc__ or "").split())
        specs.append(ToolSpec(name=name, description=description, parameters=schema))
    return specs
