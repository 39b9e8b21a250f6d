"""Named benchmarks: where each comes from (repository, pinned commit, folder), the hash of the
tree rcb-env expects, where the local copy lives, and rcb-env's own overlay for it (requirements,
timeouts, hidden paths, known issues, stand-ins). ``--pset NAME`` works wherever a path does.

Nothing of a benchmark's data is shipped: ``rcb-env get NAME`` downloads it for the user
(:mod:`rcb_env.catalog.fetch`) and refuses a tree whose hash differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from rcb_env import config
from rcb_env.errors import ConfigError, MissingTaskFileError
from rcb_env.frozen import Frozen

HERE = Path(__file__).resolve().parent


class Benchmark(Frozen):
    """A benchmark rcb-env knows by name."""

    name: str
    """What users type (``--pset NAME``)."""
    title: str
    """Human name and citation."""
    repository: str
    """Git URL of the public repository."""
    commit: str
    """The pinned commit (full hash)."""
    folder: str
    """The task tree inside the repository, e.g. ``pset``."""
    tree_hash: str
    """The hash of that folder at that commit: :func:`rcb_env.catalog.fetch.tree_hash` of its
    files (``verify="files"``), or :func:`rcb_env.catalog.fetch.listing_hash` of git's listing
    of it (``verify="git"``)."""
    verify: Literal["files", "git"] = "files"
    """``files``: every file is hashed, so any complete copy (clone, archive, folder) verifies.
    ``git``: git's listing of the folder at the commit (paths, modes, object ids) is hashed and
    every extracted file is checked against its object id; only a git repository (a URL, a
    clone or a bare mirror) can be the source, and a copy whose object store lacks some files
    (large blobs left out of a mirror) installs what it has and records what it lacks."""
    source: str = "paper2code"
    """The task source (layout) that reads it."""
    overlay: str | None = None
    """rcb-env's overlay for it, a file beside this module."""
    results: str | None = None
    """Where the paper's own results file lies in the repository (for ``import-results`` and
    the difficulty subsets); ``rcb-env get`` installs it beside the tasks
    (:meth:`results_path`) when its content is :attr:`results_sha256`."""
    results_sha256: str | None = None
    """SHA-256 of :attr:`results` at :attr:`commit` (a file of another content is not
    installed)."""
    submodules: dict[str, str] = Field(default_factory=dict)
    """Git URL of each submodule link in the task tree (path relative to :attr:`folder`): the
    benchmark records only the commit, and ``rcb-env get`` fetches that commit from here."""

    @property
    def lfs_endpoint(self) -> str:
        """The Git LFS server of :attr:`repository` (Git LFS's rule: ``<url>.git/info/lfs``)."""
        base = self.repository.rstrip("/").removesuffix(".git")
        return f"{base}.git/info/lfs"

    @property
    def archive_url(self) -> str:
        """The repository's archive of the pinned commit (GitHub's URL scheme)."""
        base = self.repository.removesuffix(".git")
        return f"{base}/archive/{self.commit}.tar.gz"

    def local_path(self) -> Path:
        """Where ``rcb-env get`` puts the verified tree."""
        return config.rcb_home() / "benchmarks" / self.name / self.commit[:12]

    def results_path(self) -> Path:
        """Where ``rcb-env get`` puts the verified results file (beside :meth:`local_path`)."""
        local = self.local_path()
        return local.with_name(f"{local.name}.results.json")

    def overlay_path(self) -> Path | None:
        return HERE / self.overlay if self.overlay else None


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            name="researchcodebench",
            title="ResearchCodeBench (Hua et al., 2025; arXiv 2506.02314)",
            repository="https://github.com/PatrickHua/ResearchCodeBench.git",
            commit="db3d16d94cfa6b6785bef6f1db0263edfe6f1d34",
            folder="pset",
            tree_hash="3e3905ec7d570d9bbc39c6903b041f2abc0f6e3ca5c8f7306f5ec3864320da26",
            overlay="researchcodebench.yaml",
            results="outputs/20llms_greedy/2025-05-12-17-13-20/overall_stats.json",
            results_sha256="612e6329b42037b8a04944174e673799b9f84df898390bd154996aaa339e8eea",
        ),
        Benchmark(
            name="lmr-bench",
            title="LMR-Bench (Yan et al., 2025; arXiv 2506.17335)",
            repository="https://github.com/du-nlp-lab/LMR-Bench.git",
            commit="2198c4229f1ee81f955caf0e4cbfdc9b6c1c8af2",
            folder="benchmark",
            tree_hash="77d3cbd7f4612de6e380fd050011bb01b00e5f4132e165cf511e3d38121128ba",
            verify="git",
            source="lmr",
            overlay="lmr-bench.yaml",
            # the commit records three submodule links and no .gitmodules; each task's
            # info.json names the repository (repo_url)
            submodules={
                "10-TimeDistill/TimeDistill": "https://github.com/LingFengGold/TimeDistill.git",
                "19-Native-Sparse-Attention/NSA": (
                    "https://github.com/fla-org/native-sparse-attention.git"
                ),
                "21-TimeMixer/TimeMixer": "https://github.com/kwuking/TimeMixer.git",
            },
        ),
    )
}


def published_results() -> Path | None:
    """The paper's results file the difficulty subsets read: ``$RCB_PUBLISHED_RESULTS``, else
    the one ``rcb-env get`` installed (the first benchmark that has one), else None."""
    given = config.settings().published_results
    if given is not None:
        return given
    for bench in BENCHMARKS.values():
        if bench.results is not None and bench.results_path().is_file():
            return bench.results_path()
    return None


def benchmark(name: str) -> Benchmark:
    """The named benchmark.

    Raises:
        ConfigError: no benchmark has that name.
    """
    found = BENCHMARKS.get(name.lower())
    if found is None:
        raise ConfigError(f"unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
    return found


def resolve(pset: str | Path) -> tuple[Path, Benchmark | None]:
    """A ``--pset`` value: a benchmark name (its verified local copy) or a folder.

    Raises:
        MissingTaskFileError: a known name whose copy has not been fetched (says how).
    """
    text = str(pset)
    if text.lower() in BENCHMARKS and not Path(text).exists():
        bench = BENCHMARKS[text.lower()]
        path = bench.local_path()
        if not (path / ".rcb-verified").is_file():
            raise MissingTaskFileError(
                f"{bench.name} is not here yet: run `rcb-env get {bench.name}`", file=path
            )
        return path, bench
    path = Path(text).expanduser().resolve()
    for bench in BENCHMARKS.values():  # a path to a fetched copy is the benchmark too
        if path == bench.local_path().resolve():
            return path, bench
    return path, None
