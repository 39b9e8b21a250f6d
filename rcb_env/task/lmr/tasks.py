"""One LMR-Bench task folder loaded: its implementations as snippets, what it needs to run here."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from rcb_env.errors import MetadataError, MissingTaskFileError, TaskLoadError
from rcb_env.task import loader
from rcb_env.task import pyregion as pr
from rcb_env.task.annotations import is_code_line
from rcb_env.task.lmr.golden import (
    _check_roundtrip,
    _function_copies,
    _golden_copies,
    _golden_weight,
)
from rcb_env.task.lmr.layout import (
    _CUDA,
    _MODEL_HUB,
    GOLDEN_DIR,
    HIDDEN,
    INFO,
    PAPER_JSON,
    PAPER_PDF,
    SOURCE_NAME,
    TEST_DIR,
    _Impl,
    _is_lfs_pointer,
    _json_line,
    _Where,
)
from rcb_env.task.models import (
    AnnotatedFile,
    Blocker,
    Overlay,
    Paper,
    PaperMeta,
    Snippet,
)


# one task ------------------------------------------------------------------------------------
def _candidates(repo: Path, rel: str, *, what: str, info: Path, line: int | None) -> list[str]:
    """Files ``rel`` may mean inside the repository: the path as named if it exists, then every
    other file with the same name (info.json's names are sometimes stale, and some repositories
    hold an unmasked copy of the goal file beside the masked one)."""
    clean = rel.strip().removeprefix("./")
    if ".." in Path(clean).parts or clean.startswith("/"):
        raise MetadataError(f"{what} {rel!r} leaves the repository", file=info, line=line)
    found = [clean] if (repo / clean).is_file() else []
    if repo.is_dir():
        stem = Path(clean).name
        found += [r for r in loader.walk_files(repo) if Path(r).name == stem and r != clean]
    return found or [clean]


def _unit_test(repo: Path, impl: _Impl, position: int) -> str:
    """The implementation's unit test: as named, else ``unit_test/unit_test_<k>.py`` for the
    implementation's place, else the only test script."""
    named = impl.unit_test_file
    if named and (repo / named).is_file():
        return named
    for k in (impl.index, position):
        guess = f"{TEST_DIR}/unit_test_{k}.py"
        if (repo / guess).is_file():
            return guess
    scripts = sorted(p.name for p in (repo / TEST_DIR).glob("unit_test*.py"))
    if len(scripts) == 1:
        return f"{TEST_DIR}/{scripts[0]}"
    return named or f"{TEST_DIR}/unit_test_{position}.py"


def _changed_functions(masked: str, golden: str) -> list[tuple[str, str | None]]:
    """Functions (name, class) whose code differs between the masked and the golden file."""

    def table(text: str) -> dict[tuple[str, str | None], str]:
        out: dict[tuple[str, str | None], str] = {}
        tree = pr.parse(text)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out[(node.name, None)] = ast.dump(node)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        out[(item.name, node.name)] = ast.dump(item)
        return out

    try:
        m, g = table(masked), table(golden)
    except SyntaxError:
        return []
    return [key for key in m if key in g and m[key] != g[key]]


def _most_masked(
    masked: str, golden: str, changed: list[tuple[str, str | None]]
) -> tuple[str, str | None]:
    """Of the functions that differ, the one that lost the most code lines to the mask (an
    implementation without ``goal_function``; other differences are incidental edits)."""

    def lost(key: tuple[str, str | None]) -> int:
        try:
            a = pr.align(masked, golden, key[0], key[1])
        except pr.RegionError:
            return -1
        kept = sum(is_code_line(x) for x in pr.split_lines(a.masked.text(pr.split_lines(masked))))
        had = sum(is_code_line(x) for x in pr.split_lines(a.reference.text(pr.split_lines(golden))))
        return had - kept

    return max(changed, key=lost)


_FIXTURE = re.compile(r"^[\w./-]+\.(pt|pth|pkl|pickle|npy|npz|json|jsonl|csv|tsv|bin|safetensors)$")


def _absent_fixtures(repo: Path, test_file: str, text: str) -> list[str]:
    """Data files the test names as string literals that are nowhere in the repository (looked
    up from the repository root, the test's folder, and by file name)."""
    try:
        tree = pr.parse(text)
    except SyntaxError:
        return []
    names = {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and _FIXTURE.match(n.value)
    }
    basenames = {Path(r).name for r in loader.walk_files(repo)}
    here = (repo / test_file).parent
    return sorted(
        n
        for n in names
        if not (repo / n).exists() and not (here / n).exists() and Path(n).name not in basenames
    )


def _blockers(
    repo: Path,
    test_file: str,
    *,
    missing: set[str],
    repo_rel: str,
    hub_assets: bool = False,
) -> tuple[Blocker, ...]:
    """Why an implementation cannot run on a CPU machine without network, from its files, the
    most telling reason first. ``hub_assets``: the overlay declares the model files the test
    downloads (fetched by ``setup --assets``), so a download is not a reason."""
    test = repo / test_file
    if not test.is_file():
        return (Blocker(kind="test", reason=f"its unit test {test_file} is not in the repository"),)
    text = test.read_text(encoding="utf-8", errors="replace")
    found: list[Blocker] = []
    lacking = sorted(
        m.removeprefix(repo_rel)
        for m in missing
        if m.startswith(repo_rel) and Path(m).name in text and not m.endswith(PAPER_PDF)
    )
    if lacking:
        found.append(
            Blocker(
                kind="missing",
                reason=f"files the test reads are missing from this copy: {', '.join(lacking)}",
            )
        )
    here = Path(test_file).parent
    named = [
        rel
        for rel in loader.walk_files(repo)
        if Path(rel).name in text and Path(rel).suffix != ".py" and _is_lfs_pointer(repo / rel)
    ]
    # A name the test uses may exist in several folders: the test's own folder speaks for it.
    lfs = sorted(
        rel
        for rel in named
        if Path(rel).parent == here
        or rel in text
        or not any(Path(o).name == Path(rel).name and Path(o).parent == here for o in named)
    )
    absent = _absent_fixtures(repo, test_file, text)
    if absent:
        found.append(
            Blocker(
                kind="absent",
                reason="test fixtures are not in the repository: "
                + ", ".join(absent[:6])
                + (f" and {len(absent) - 6} more" if len(absent) > 6 else ""),
            )
        )
    if lfs:
        found.append(
            Blocker(
                kind="lfs",
                reason="test fixtures are Git LFS pointers whose content is not in the "
                "repository (rcb-env get fetches it): "
                + ", ".join(lfs[:6])
                + (f" and {len(lfs) - 6} more" if len(lfs) > 6 else ""),
            )
        )
    if _MODEL_HUB.search(text) and not hub_assets:
        found.append(
            Blocker(
                kind="hub",
                reason="the test downloads a pretrained model from a model hub (no network in "
                "sandboxes, and no assets declared for it)",
            )
        )
    if _CUDA.search(text) and "is_available" not in text:
        found.append(Blocker(kind="cuda", reason="the test needs a CUDA GPU"))
    return tuple(found)


def load_task(
    folder: Path,
    overlay: Overlay,
    *,
    missing: set[str] | None = None,
    submodules: set[str] | None = None,
) -> Paper:
    """One task folder as a paper with one snippet per implementation.

    ``missing``/``submodules``: files the installed copy lacks and empty submodule folders,
    relative to ``folder`` (see :func:`rcb_env.catalog.fetch.verified_gaps`).

    Raises:
        TaskLoadError: ``info.json`` is missing or malformed, or an implementation's function
            cannot be found or aligned (names file, line and implementation).
    """
    missing = missing or set()
    submodules = submodules or set()
    info = folder / INFO
    try:
        text = info.read_text(encoding="utf-8")
    except OSError as exc:
        raise MissingTaskFileError(f"cannot read {INFO}: {exc.strerror}", file=info) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetadataError(f"not valid JSON: {exc.msg}", file=info, line=exc.lineno) from None
    if not isinstance(data, dict):
        raise MetadataError("must be a JSON object", file=info, line=1)
    raw_impls = data.get("implementations")
    if not isinstance(raw_impls, list) or not raw_impls:
        raise MetadataError(
            "needs a non-empty 'implementations' list",
            file=info,
            line=_json_line(text, "implementations") or 1,
        )
    repo_name = data.get("repo_folder_name")
    if not isinstance(repo_name, str) or not (folder / repo_name).is_dir():
        others = [
            d.name
            for d in folder.iterdir()
            if d.is_dir() and d.name not in {GOLDEN_DIR, "__pycache__"} and d.name[0] != "."
        ]
        if len(others) != 1:
            raise MetadataError(
                f"repo_folder_name {repo_name!r} is not a folder here (found: {sorted(others)})",
                file=info,
                line=_json_line(text, "repo_folder_name"),
            )
        repo_name = others[0]
    repo = folder / repo_name
    repo_rel = f"{repo_name}/"
    empty = repo_name in submodules or not any(repo.iterdir())
    title = data.get("paper_name")
    meta = PaperMeta(
        id=folder.name,
        title=str(title) if title else None,
        arxiv_abs=str(data["paper_url"]) if data.get("paper_url") else None,
        github_url=str(data["repo_url"]) if data.get("repo_url") else None,
    )
    patterns = (*HIDDEN, f"/{TEST_DIR}/", loader.OVERLAY_FILE, *overlay.hidden_paths)
    offsets = [m.start() for m in re.finditer(r'"instruction"', text)]
    impls = [
        _Impl(raw, i + 1, info, text, offsets[i] if i < len(offsets) else 0)
        for i, raw in enumerate(raw_impls)
    ]
    names = [f"{impl.position}-{impl.goal_function or 'function'}" for impl in impls]
    slugs = dict(zip(names, [loader.slugify(n) for n in names], strict=True))
    snippets: list[Snippet] = []
    annotated: dict[str, str] = {}
    for impl, name in zip(impls, names, strict=True):
        snippet = _snippet(
            folder,
            repo,
            impl,
            name,
            slugs[name],
            empty=empty,
            missing=missing,
            repo_rel=repo_rel,
            hub_assets=bool(overlay.assets),
        )
        if not impl.goal_function and snippet.symbol:  # found by comparing the files
            named = f"{impl.position}-{snippet.symbol.rsplit('.', 1)[-1]}"
            snippet = snippet.model_copy(update={"name": named, "slug": loader.slugify(named)})
        snippets.append(snippet)
        if snippet.masked_text:
            annotated.setdefault(snippet.file, snippet.masked_text)
    goal_files = {s.file for s in snippets}
    copies = _golden_copies(folder.resolve(), repo.resolve()) if not empty else ()
    twins = _function_copies(repo, snippets, skip={*goal_files, *copies}) if not empty else ()
    patterns = (*patterns, *(f"/{c}" for c in (*copies, *twins)))
    hidden = tuple(
        rel
        for rel in (loader.walk_files(repo) if not empty else ())
        if rel not in goal_files and loader.is_hidden(rel, patterns)
    )
    env = {"PYTHONPATH": ".", **overlay.env}
    return Paper(
        meta=meta,
        source=SOURCE_NAME,
        root=repo.resolve(),
        slug=loader.slugify(folder.name),
        paper_file=PAPER_JSON,
        test_file=snippets[0].test_file or f"{TEST_DIR}/unit_test_1.py",
        annotated_files=tuple(AnnotatedFile(path=p, text=t) for p, t in annotated.items()),
        hidden_patterns=patterns,
        hidden_paths=hidden,
        overlay=overlay.model_copy(update={"env": env}),
        snippets=tuple(snippets),
        excluded_paths=copies,
        unavailable=(
            f"empty repository: {repo_name}/ is a git submodule link whose content is not in "
            "the benchmark"
            if empty
            else None
        ),
    )


def _snippet(
    folder: Path,
    repo: Path,
    impl: _Impl,
    name: str,
    slug: str,
    *,
    empty: bool,
    missing: set[str],
    repo_rel: str,
    hub_assets: bool = False,
) -> Snippet:
    info = folder / INFO
    where = _Where(file=info, line=impl.line, snippet=name)
    golden_rel = impl.golden_file
    golden = folder / golden_rel
    if not golden.is_file():
        raise MissingTaskFileError(f"golden file {golden_rel} does not exist", **where)
    golden_text = golden.read_text(encoding="utf-8", errors="replace")
    goals = _candidates(repo, impl.goal_file, what="goal_file", info=info, line=impl.line)
    goal = goals[0]
    test = _unit_test(repo, impl, impl.position)
    function, class_name = impl.goal_function, impl.class_name

    def make(weight: int, **region: Any) -> Snippet:
        return Snippet(
            paper_id=folder.name,
            name=name,
            slug=slug,
            file=goal,
            depth=0,
            parent=None,
            children=(),
            weight=weight,
            distinct_lines=weight,
            test_file=test,
            instruction=impl.instruction or None,
            **region,
        )

    if empty:
        # Nothing to mask or run; keep the implementation listed, weighed by the golden file.
        return make(
            _golden_weight(golden_text, function, class_name),
            start_line=0,
            end_line=1,
            indent="",
            reference_body="",
            masked_text="",
            placeholder="",
            symbol=f"{class_name}.{function}" if class_name else function or None,
        )
    if not (repo / goal).is_file():
        raise MissingTaskFileError(f"goal file {impl.goal_file} is not in {repo.name}/", **where)
    errors: list[str] = []
    for goal in goals:
        masked_text = (repo / goal).read_text(encoding="utf-8", errors="replace")
        if not function:
            changed = _changed_functions(masked_text, golden_text)
            if not changed:
                errors.append(f"{goal} does not differ from {golden_rel} in any function")
                continue
            function, class_name = _most_masked(masked_text, golden_text, changed)
        try:
            a = pr.align(masked_text, golden_text, function, class_name)
            break
        except pr.RegionError as exc:
            errors.append(f"{goal} against {golden_rel}: {exc}")
    else:
        what = "no goal_function, and no file" if not impl.goal_function else "no file"
        raise TaskLoadError(
            f"{what} named {Path(impl.goal_file).name} has a masked function: " + "; ".join(errors),
            **where,
        )
    symbol = f"{class_name}.{function}" if class_name else function
    m_lines, g_lines = pr.split_lines(masked_text), pr.split_lines(golden_text)
    placeholder = a.masked.text(m_lines)
    reference = pr.reindent(a.reference.text(g_lines), a.reference.indent, a.masked.indent)
    _check_roundtrip(masked_text, a, reference, golden_text, function, class_name, where)
    weight = sum(is_code_line(line) for line in pr.split_lines(reference))
    blockers = _blockers(repo, test, missing=missing, repo_rel=repo_rel, hub_assets=hub_assets)
    reason = blockers[0].reason if blockers else None
    return make(
        weight,
        start_line=a.masked.before,
        end_line=a.masked.after,
        indent=a.masked.indent,
        reference_body=reference,
        masked_text=masked_text,
        placeholder=placeholder,
        symbol=symbol,
        unavailable=reason,
        blockers=blockers,
    )
