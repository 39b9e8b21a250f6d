"""Bad input never crashes: the action parser, the annotation parser and the pset loader raise
only their typed errors, whatever they are given."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcb_env.errors import TaskLoadError
from rcb_env.task import annotations as ann
from rcb_env.task import load
from rcb_env.tools.actions import ActionError, parse_action, tool_names
from tests.conftest import math_files, write_paper

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
_fields = st.sampled_from(
    [
        "path",
        "start_line",
        "end_line",
        "pattern",
        "glob",
        "old",
        "new",
        "content",
        "command",
        "timeout_s",
        "section",
        "body",
        "extra",
    ]
)
_actions = st.fixed_dictionaries(
    {"tool": st.sampled_from([*tool_names(), "nope", "", "SUBMIT"]) | _json},
    optional={f: _json for f in ["path", "start_line", "old", "command", "timeout_s", "body"]},
) | st.dictionaries(_fields, _json, max_size=5)


@settings(max_examples=400, deadline=None)
@given(raw=_actions | _json | st.text(max_size=200) | st.binary(max_size=100))
def test_action_parser_only_raises_action_errors(raw: Any) -> None:
    try:
        parse_action(raw)
    except ActionError as exc:
        assert str(exc)
    if isinstance(raw, dict):
        with contextlib.suppress(ActionError):
            parse_action(json.dumps(raw))


def test_huge_actions_are_refused_quickly() -> None:
    for raw in ({"tool": "write_file", "path": "a", "content": "x" * 3_000_000}, "[" * 2_000_000):
        try:
            parse_action(raw)
        except ActionError as exc:
            assert "limit" in str(exc) or "JSON" in str(exc)
        else:
            raise AssertionError("accepted a huge action")


_marker_lines = st.sampled_from(
    [
        '# <paper2code name="a">',
        '# </paper2code name="a">',
        '    # <paper2code name="b">',
        '    # </paper2code name="b">',
        '# <paper2code name="a b">',
        "# <paper2code name='x'>",
        'x = 1  # </paper2code name="a">',
        "# <paper2code>",
        "x = 1",
        "",
        "    return y",
        '"""doc"""',
    ]
)


@settings(max_examples=500, deadline=None)
@given(lines=st.lists(_marker_lines | st.text(max_size=40), max_size=30))
def test_annotation_parser_only_raises_load_errors(lines: list[str]) -> None:
    text = "\n".join(lines)
    try:
        spans = ann.parse_spans(text, "f.py")
    except TaskLoadError as exc:
        assert exc.file == "f.py"
        return
    for span in spans:
        assert ann.insert(text, span, ann.reference_body(text, span)) == text
        ann.mask(text, span)


_yaml_docs = st.sampled_from(
    [
        "- id: m\n  annotated_file_paths: stats.py\n",
        "- id: m\n  annotated_file_paths: [stats.py, stats.py]\n",
        "- id: m\n  annotated_file_paths: 5\n",
        "- {id: m, annotated_file_paths: stats.py, first_commit_date: 2025-13-45}\n",
        "- {id: ../m, annotated_file_paths: stats.py}\n",
        "- id: m\n  annotated_file_paths: stats.py\n  context_file_paths: {a: b}\n",
        "{}\n",
        "- [1, 2]\n",
        "- id: m\n  annotated_file_paths: '/etc/passwd'\n",
        ": : :\n",
        "- id: m\n\tbad: tab\n",
        "",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_yaml_docs | st.text(max_size=120))
def test_pset_loader_only_raises_load_errors(doc: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_paper(root, "m", math_files())
        (root / "papers.yaml").write_text(doc)
        try:
            pset = load(root)
        except TaskLoadError as exc:
            assert str(exc)
            return
        for failure in pset.failures:
            assert failure.message
