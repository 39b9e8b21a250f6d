"""Terminal renderings of loaded tasks."""

from __future__ import annotations

from rich.table import Table
from rich.tree import Tree

from rcb_env.task.models import Paper, Pset


def tasks_table(p: Pset, root_label: str) -> Table:
    """Per-paper counts: files, snippets, nesting, weights."""
    table = Table(title=f"Tasks in {root_label}")
    for col in (
        "paper",
        "date",
        "files",
        "snippets",
        "top-level",
        "max depth",
        "weight",
        "distinct",
    ):
        table.add_column(
            col, justify="left" if col in ("paper", "date") else "right", no_wrap=col == "paper"
        )
    for paper in p.papers:
        s = paper.snippets
        date = paper.meta.first_commit_date or paper.meta.arxiv_v1_date
        table.add_row(
            paper.id,
            str(date or "-"),
            str(len(paper.annotated_files)),
            str(len(s)),
            str(sum(1 for x in s if x.depth == 0)),
            str(max((x.depth for x in s), default=-1) + 1),
            str(paper.total_weight),
            str(sum(x.distinct_lines for x in s)),
        )
    allsn = p.snippets
    table.add_section()
    table.add_row(
        f"{len(p.papers)} papers",
        "",
        str(sum(len(x.annotated_files) for x in p.papers)),
        str(len(allsn)),
        str(sum(1 for x in allsn if x.depth == 0)),
        str(max((x.depth for x in allsn), default=-1) + 1),
        str(sum(x.weight for x in allsn)),
        str(sum(x.distinct_lines for x in allsn)),
    )
    return table


def snippet_tree(paper: Paper) -> Tree:
    """Every snippet with its nesting, place and weight."""
    root = Tree(f"[bold]{paper.id}[/bold] ({paper.total_weight} lines)")
    nodes: dict[str, Tree] = {}
    for s in paper.snippets:
        parent = nodes[s.parent] if s.parent is not None else root
        label = f"{s.name} [dim]{s.file}:{s.start_line}-{s.end_line}[/dim] weight {s.weight}"
        nodes[s.name] = parent.add(label, highlight=False)
    return root
