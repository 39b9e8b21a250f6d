"""The annotation grammar: weights, masking, re-insertion and malformed files."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcb_env.errors import AnnotationError, DuplicateSnippetError
from rcb_env.guest.protocol import split_lines
from rcb_env.task import annotations as ann

NESTED = '''\
def f(x):
    # <paper2code name="outer">
    """Docstring lines count."""
    y = x + 1  # trailing comments count

    # comment-only lines do not count
    # <paper2code name="inner">
    z = y * 2
    # </paper2code name="inner">
    return z
    # </paper2code name="outer">
'''


def test_weight_counts_code_docstrings_and_children_but_not_blank_or_comment_lines() -> None:
    spans = {s.name: s for s in ann.parse_spans(NESTED, "f.py")}
    assert ann.weight(NESTED, spans["outer"]) == 4  # docstring, y=, z= (child), return
    assert ann.weight(NESTED, spans["inner"]) == 1
    assert ann.distinct_lines(NESTED, spans["outer"], tuple(spans.values())) == 3


def test_spans_record_nesting_and_one_based_marker_lines() -> None:
    spans = {s.name: s for s in ann.parse_spans(NESTED, "f.py")}
    assert (spans["outer"].start_line, spans["outer"].end_line) == (2, 11)
    assert (spans["inner"].start_line, spans["inner"].end_line) == (7, 9)
    assert spans["inner"].parent == "outer"
    assert spans["inner"].depth == 1
    assert spans["outer"].depth == 0


def test_mask_replaces_the_whole_snippet_and_deletes_every_other_marker() -> None:
    spans = {s.name: s for s in ann.parse_spans(NESTED, "f.py")}
    masked = ann.mask(NESTED, spans["inner"])
    assert masked == (
        "def f(x):\n"
        '    """Docstring lines count."""\n'
        "    y = x + 1  # trailing comments count\n"
        "\n"
        "    # comment-only lines do not count\n"
        '    # TODO: Implement block "inner"\n'
        "    # Approximately 1 line(s) of code.\n"
        "    return z\n"
    )
    masked_outer = ann.mask(NESTED, spans["outer"])
    assert masked_outer == (
        'def f(x):\n    # TODO: Implement block "outer"\n    # Approximately 4 line(s) of code.\n'
    )


def test_mask_uses_minimum_indentation_including_markers() -> None:
    text = 'if True:\n  # <paper2code name="a">\n  if x:\n      y = 1\n  # </paper2code name="a">\n'
    (span,) = ann.parse_spans(text, "t.py")
    assert ann.mask(text, span).splitlines()[1] == '  # TODO: Implement block "a"'


def test_insert_keeps_all_markers_and_replaces_only_the_inside() -> None:
    spans = {s.name: s for s in ann.parse_spans(NESTED, "f.py")}
    out = ann.insert(NESTED, spans["inner"], "    z = y + y")
    assert '    # <paper2code name="inner">\n    z = y + y\n    # </paper2code name="inner">' in out
    assert out.count("paper2code") == NESTED.count("paper2code")


def test_crlf_file_round_trips_and_masks_with_crlf() -> None:
    text = NESTED.replace("\n", "\r\n")
    for span in ann.parse_spans(text, "f.py"):
        assert ann.insert(text, span, ann.reference_body(text, span)) == text
        assert "\r\n" in ann.mask(text, span)
        assert ann.weight(text, span) == ann.weight(NESTED, span)


@pytest.mark.parametrize(
    ("text", "line", "snippet", "words"),
    [
        ('# <paper2code name="a">\nx = 1\n', 1, "a", "never closed"),
        ('x = 1\n# </paper2code name="a">\n', 2, "a", "no snippet is open"),
        (
            '# <paper2code name="a">\n# <paper2code name="b">\n# </paper2code name="a">\n'
            '# </paper2code name="b">\n',
            3,
            "a",
            'crosses snippet "b"',
        ),
        (
            'def f():\n    # <paper2code name="a">\n    x = 1\n# </paper2code name="a">\n',
            4,
            "a",
            "indented by 0",
        ),
        ('x = 1  # <paper2code name="a">\n', 1, None, "malformed marker"),
        ("# <paper2code name='a'>\n", 1, None, "malformed marker"),
    ],
)
def test_malformed_files_name_file_line_and_snippet(
    text: str, line: int, snippet: str | None, words: str
) -> None:
    with pytest.raises(AnnotationError) as info:
        ann.parse_spans(text, "pkg/model.py")
    err = info.value
    assert (err.file, err.line, err.snippet) == ("pkg/model.py", line, snippet)
    assert words in str(err)
    assert f"pkg/model.py:{line}" in str(err)


def test_duplicate_names_in_one_file_are_rejected() -> None:
    text = (
        '# <paper2code name="a">\n# </paper2code name="a">\n'
        '# <paper2code name="a">\nx\n# </paper2code name="a">\n'
    )
    with pytest.raises(DuplicateSnippetError) as info:
        ann.parse_spans(text, "m.py")
    assert info.value.line == 3
    assert info.value.snippet == "a"
    assert "first opened at line 1" in str(info.value)


# --- property test: generated nested files -------------------------------------------------

_names = st.text(
    alphabet=st.characters(blacklist_characters='"\n\r', blacklist_categories=("Cs", "Cc")),
    min_size=1,
    max_size=12,
).filter(lambda s: s.strip() == s and s != "")
_code_line = st.sampled_from(
    [
        "x = 1",
        "return y  # trailing",
        '"""doc line"""',
        "",
        "   ",
        "# a comment",
        "    # indented comment",
        "call(a, b)\t",
        "s = '# not a comment'",
        "é = 'ünïcode'",
    ]
)


@st.composite
def _tree(draw: st.DrawFn, depth: int = 0) -> list[object]:
    """A block: a list of code lines (str) and child blocks (tuple[name, block])."""
    items: list[object] = []
    for _ in range(draw(st.integers(0, 4))):
        if depth < 4 and draw(st.booleans()):
            items.append((draw(_names), draw(_tree(depth + 1))))
        else:
            items.append(draw(_code_line))
    return items


def _render(
    block: list[object], indent: str, out: list[str], expected: dict[str, int], nl: str
) -> int:
    weight = 0
    for item in block:
        if isinstance(item, tuple):
            name, child = item
            out.append(f'{indent}# <paper2code name="{name}">{nl}')
            w = _render(child, indent + "  ", out, expected, nl)
            out.append(f'{indent}# </paper2code name="{name}">{nl}')
            expected[name] = w
            weight += w
        else:
            line = f"{indent}{item}"
            out.append(line + nl)
            stripped = str(item).strip()
            weight += bool(stripped) and not stripped.startswith("#")
    return weight


@settings(max_examples=300, deadline=None)
@given(tree=_tree(), nl=st.sampled_from(["\n", "\r\n"]), final_newline=st.booleans())
def test_round_trip_weights_and_masks_on_generated_nested_files(
    tree: list[object], nl: str, final_newline: bool
) -> None:
    names: set[str] = set()

    def dedupe(block: list[object]) -> list[object]:
        out: list[object] = []
        for item in block:
            if isinstance(item, tuple):
                name = item[0]
                while name in names:
                    name += "'"
                names.add(name)
                out.append((name, dedupe(item[1])))
            else:
                out.append(item)
        return out

    tree = dedupe(tree)
    lines: list[str] = []
    expected: dict[str, int] = {}
    _render(tree, "", lines, expected, nl)
    text = "".join(lines)
    if not final_newline and text.endswith(nl):
        text = text[: -len(nl)]
    spans = ann.parse_spans(text, "gen.py")
    assert {s.name: ann.weight(text, s) for s in spans} == expected
    for span in spans:
        body = ann.reference_body(text, span)
        assert ann.insert(text, span, body) == text  # byte for byte
        masked = ann.mask(text, span)
        assert not any(ann.is_marker(line) for line in split_lines(masked))
        assert f'# TODO: Implement block "{span.name}"' in masked
        assert f"# Approximately {expected[span.name]} line(s) of code." in masked
    # Code lines are counted once over the innermost snippets.
    assert sum(ann.distinct_lines(text, s, spans) for s in spans) == sum(
        ann.weight(text, s) for s in spans if s.depth == 0
    )
