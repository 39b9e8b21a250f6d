"""Headings as real papers write them: the outline and read_paper's sections depend on them."""

from __future__ import annotations

import pytest

from rcb_env.tools.paper import headings, outline, section

LATEX = [
    (r"\section{Introduction}\label{sec:intro}", 2, "Introduction"),
    (r"\section{Introduction} \label{sec:intro}", 2, "Introduction"),
    (r"\section{\label{sec:intro}Introduction}", 2, "Introduction"),
    (r"\section*{Acknowledgements}", 2, "Acknowledgements"),
    (r"\subsection[Short]{A Much Longer Title}", 3, "A Much Longer Title"),
    (r"\subsection[Short {with} braces]{Long}", 3, "Long"),
    (r"\section{The $\mathcal{O}(n)$ Bound}", 2, r"The $\mathcal{O}(n)$ Bound"),
    (r"\section{Method}% a comment", 2, "Method"),
    (
        r"\subsection{Results on \textsc{ImageNet}}\label{sec:in}",
        3,
        r"Results on \textsc{ImageNet}",
    ),
    (r"  \paragraph{Setup.} We train for 10 epochs.", 5, "Setup."),
    (r"\section {Spaced Out}", 2, "Spaced Out"),
    (r"\section{Braces \{escaped\} stay}", 2, r"Braces \{escaped\} stay"),
    (r"\subsubsection*{Why it works}\label{a}\label{b}", 4, "Why it works"),
    (r"\chapter{Appendix}", 1, "Appendix"),
]


@pytest.mark.parametrize(("line", "level", "title"), LATEX)
def test_latex_heading_forms(line: str, level: int, title: str) -> None:
    found = headings(f"Some text.\n{line}\nBody.\n", markdown=False)
    assert [(h.level, h.title, h.line) for h in found] == [(level, title, 1)]


def test_latex_title_over_several_lines_and_non_headings() -> None:
    text = "\n".join(
        [
            r"\section{A title that",
            r"  goes on % with a comment",
            r"  and ends}\label{sec:long}",
            r"% \section{Commented out}",
            r"\sectionmark{not a heading}",
            r"\newcommand{\section}{x}",
            r"\section{Unclosed",
            "text",
        ]
    )
    assert [(h.level, h.title) for h in headings(text, markdown=False)] == [
        (2, "A title that goes on and ends")
    ]


def test_markdown_heading_forms() -> None:
    text = "\n".join(
        [
            "# Title",
            "## 2. Method ##",
            "Setext Title",
            "============",
            "Sub Title",
            "---",
            "```python",
            "# not a heading",
            "```",
            "#hashtag is not a heading",
            "###### Deep",
        ]
    )
    assert [(h.level, h.title) for h in headings(text, markdown=True)] == [
        (1, "Title"),
        (2, "2. Method"),
        (1, "Setext Title"),
        (2, "Sub Title"),
        (6, "Deep"),
    ]


def test_sections_and_outline_use_the_clean_titles() -> None:
    tex = "\n".join(
        [
            r"\section{Intro}\label{sec:intro}",
            "Why.",
            r"\subsection{Background}\label{sec:bg}",
            "Before.",
            r"\section{Method}\label{sec:method}",
            "How.",
        ]
    )
    assert outline(tex, markdown=False) == "- Intro\n  - Background\n- Method"
    intro = section(tex, markdown=False, query="intro")
    assert intro is not None
    assert intro.splitlines() == [
        r"\section{Intro}\label{sec:intro}",
        "Why.",
        r"\subsection{Background}\label{sec:bg}",
        "Before.",
    ]
    assert section(tex, markdown=False, query="sec:intro") is None  # labels are not titles
