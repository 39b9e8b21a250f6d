"""What a networked `get` / `setup --assets` fetches, against local servers only: a Git LFS batch
server, a model hub file server (for the hub's own client library), local git repositories as a
submodule's remote and as a git-pinned package's source. Fetched, verified, corrupted copies
refused, the task then loads as runnable."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

import rcb_env
from rcb_env.catalog import Benchmark, complete, fetch, gitpkg, lfs
from rcb_env.catalog.assets import Asset, AssetError, read_pins
from rcb_env.cli import cli
from rcb_env.grading import Grader
from rcb_env.task import environments as envs
from tests import lmr_tasks as lt

FIXTURE = b'{"factor": 3, "input": [1, 2], "output": [3, 6]}'
COMMIT = "c0ffee" + "0" * 34


def _git(*args: str, cwd: Path) -> str:
    run = subprocess.run(
        ["git", "-c", "user.email=a@b", "-c", "user.name=t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.strip()


def _pointer(data: bytes) -> bytes:
    oid = hashlib.sha256(data).hexdigest()
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n".encode()
    )


class _Server:
    """A threaded HTTP server on 127.0.0.1 whose answers the test sets."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.objects = {}  # type: ignore[attr-defined]
        self.httpd.requests = []  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _LfsHandler(BaseHTTPRequestHandler):
    """The Git LFS batch API (download, basic transfer) and the object downloads it points to."""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append(("batch", body))  # type: ignore[attr-defined]
        assert self.path.endswith("/objects/batch")
        assert self.headers["Accept"] == "application/vnd.git-lfs+json"
        host = f"http://127.0.0.1:{server.server_port}"  # type: ignore[attr-defined]
        objects = []
        for o in body["objects"]:
            if o["oid"] in server.objects:  # type: ignore[attr-defined]
                href = f"{host}/obj/{o['oid']}"
                objects.append(
                    {**o, "actions": {"download": {"href": href, "header": {"X-T": "1"}}}}
                )
            else:
                objects.append({**o, "error": {"code": 404, "message": "Object does not exist"}})
        data = json.dumps({"transfer": "basic", "objects": objects}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.git-lfs+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        server = self.server
        oid = self.path.rsplit("/", 1)[-1]
        server.requests.append(("get", oid))  # type: ignore[attr-defined]
        data = server.objects[oid]  # type: ignore[attr-defined]
        assert self.headers["X-T"] == "1"  # the action's header is sent
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _HubHandler(BaseHTTPRequestHandler):
    """The model hub's file API as its client uses it: HEAD then GET on
    ``/<repo>/resolve/<revision>/<file>``, the commit in ``X-Repo-Commit``."""

    def log_message(self, *args: object) -> None:
        pass

    def _find(self) -> tuple[bytes, str] | None:
        repo_rev, _, name = self.path.partition("/resolve/")
        rev, _, file = name.partition("/")
        repo = repo_rev.strip("/")
        files = self.server.objects.get(repo)  # type: ignore[attr-defined]
        if files is None or rev not in ("main", COMMIT) or file not in files:
            return None
        return files[file], COMMIT

    def _answer(self, body: bool) -> None:
        found = self._find()
        self.server.requests.append((self.command, self.path))  # type: ignore[attr-defined]
        if found is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data, commit = found
        self.send_response(200)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)


@pytest.fixture
def lfs_server() -> Iterator[_Server]:
    s = _Server(_LfsHandler)
    yield s
    s.close()


@pytest.fixture
def hub_server() -> Iterator[_Server]:
    s = _Server(_HubHandler)
    yield s
    s.close()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "home"
    monkeypatch.setenv("RCB_ENV_HOME", str(where))
    return where


def _benchmark(tmp_path: Path, *, submodule: str | None = None, url: str = "") -> Benchmark:
    """A git repository holding an LMR-layout benchmark whose 01-Toy fixture is an LFS pointer
    (and, with ``submodule``, a submodule link 02-Weak/weak-main at that commit)."""
    repo = tmp_path / "repo"
    lt.write_benchmark(repo / "benchmark")
    (repo / "benchmark/01-Toy/toy-repo/unit_test/scaler_io.json").write_bytes(_pointer(FIXTURE))
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    if submodule is not None:
        _git("rm", "-r", "-q", "--cached", "benchmark/02-Weak/weak-main", cwd=repo)
        _git(
            "update-index",
            "--add",
            "--cacheinfo",
            f"160000,{submodule},benchmark/02-Weak/weak-main",
            cwd=repo,
        )
    _git("commit", "-qm", "tasks", cwd=repo)
    commit = _git("rev-parse", "HEAD", cwd=repo)
    return Benchmark(
        name="lmr-net",
        title="t",
        repository=str(repo),
        commit=commit,
        folder="benchmark",
        tree_hash=fetch.listing_hash(fetch._listing(repo, commit, "benchmark")),
        verify="git",
        source="lmr",
        submodules={"02-Weak/weak-main": url} if url else {},
    )


def _forward(path: Path) -> rcb_env.Snippet:
    toy = rcb_env.load(path).paper("01-Toy")
    return next(s for s in toy.snippets if s.name == "2-forward")


def test_get_fetches_lfs_objects_through_the_batch_api_verified_and_cached(
    tmp_path: Path, home: Path, lfs_server: _Server, grader: Grader
) -> None:
    bench = _benchmark(tmp_path)
    path = fetch.fetch(bench, bench.repository)
    before = _forward(path)
    assert before.unavailable is not None
    assert [b.kind for b in before.blockers] == ["lfs"]
    assert complete.describe(complete.needs(bench, path))["01-Toy"][0] == (
        f"1 LFS file ({len(FIXTURE)} B)",
    )
    oid = hashlib.sha256(FIXTURE).hexdigest()
    fixture = path / "01-Toy/toy-repo/unit_test/scaler_io.json"
    # the server has not got it: an error naming the file, the pointer stays
    with pytest.raises(lfs.LfsError, match=r"scaler_io\.json.*Object does not exist"):
        complete.complete(bench, path, lfs_endpoint=lfs_server.url + "/lfs")
    # it serves other bytes than the pointer names: refused, naming the file, nothing installed
    lfs_server.httpd.objects[oid] = FIXTURE.replace(b"6", b"7")  # type: ignore[attr-defined]
    with pytest.raises(lfs.LfsError, match=r"scaler_io\.json.*not the one its pointer names"):
        complete.complete(bench, path, lfs_endpoint=lfs_server.url + "/lfs")
    assert lfs.read_pointer(fixture) is not None
    assert not lfs.cached(oid).exists()
    # the right bytes: installed, cached by oid, recorded
    lfs_server.httpd.objects[oid] = FIXTURE  # type: ignore[attr-defined]
    done = complete.complete(bench, path, lfs_endpoint=lfs_server.url + "/lfs")
    assert (done.lfs_files, done.lfs_bytes) == (1, len(FIXTURE))
    assert fixture.read_bytes() == FIXTURE
    assert lfs.cached(oid).read_bytes() == FIXTURE
    assert (
        f"lfs\t01-Toy/toy-repo/unit_test/scaler_io.json\t{oid}"
        in (path / fetch.VERIFIED).read_text()
    )
    batch = next(body for kind, body in lfs_server.httpd.requests if kind == "batch")  # type: ignore[attr-defined]
    assert batch["operation"] == "download"
    assert batch["objects"] == [{"oid": oid, "size": len(FIXTURE)}]
    after = _forward(path)
    assert after.unavailable is None
    assert after.blockers == ()
    # the task then runs: its reference passes the test that reads the fixture
    toy = rcb_env.load(path).paper("01-Toy")
    verdict = grader.grade(toy, after, after.reference_body)
    assert verdict.passed, (verdict.detail, verdict.stderr[-800:])
    assert complete.needs(bench, path)["01-Toy"].lfs == ()
    # a fresh install of the same tree takes the object from the cache: no download
    n = len(lfs_server.httpd.requests)  # type: ignore[attr-defined]
    path = fetch.fetch(bench, bench.repository, force=True)
    complete.complete(bench, path, lfs_endpoint=lfs_server.url + "/lfs")
    assert len(lfs_server.httpd.requests) == n  # type: ignore[attr-defined]
    assert fixture.read_bytes() == FIXTURE


def test_get_cli_takes_an_lfs_mirror_and_prints_per_task_what_runs(
    tmp_path: Path, home: Path, lfs_server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rcb_env import catalog

    bench = _benchmark(tmp_path)
    monkeypatch.setitem(catalog.BENCHMARKS, bench.name, bench)
    plan = CliRunner().invoke(cli, ["get", bench.name, "--plan"])
    assert plan.exit_code == 1
    assert "not here yet" in plan.output
    fixture = bench.local_path() / "01-Toy/toy-repo/unit_test/scaler_io.json"
    # offline: the verified tree, and what needs a network fetch first
    result = CliRunner().invoke(cli, ["get", bench.name, "--from", bench.repository, "--offline"])
    assert result.exit_code == 0, result.output
    assert lfs_server.httpd.requests == []  # type: ignore[attr-defined]
    assert f"1 LFS file ({len(FIXTURE)} B)" in result.output
    assert "run now: 2 of 2 tasks, 4 of 5 snippets" in result.output
    assert "after a networked get + setup --assets: 2 tasks, 5 snippets" in result.output
    # the mirror lacks the object: said, naming the file; the verified tree stays
    args = ["get", bench.name, "--lfs-endpoint", lfs_server.url]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "not fetched" in result.output
    assert "scaler_io.json" in result.output
    assert lfs.read_pointer(fixture) is not None
    lfs_server.httpd.objects[hashlib.sha256(FIXTURE).hexdigest()] = FIXTURE  # type: ignore[attr-defined]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "1 LFS files installed" in result.output
    assert "get would fetch" in result.output
    assert fixture.read_bytes() == FIXTURE


def test_get_fetches_a_submodule_at_the_recorded_commit_verified(
    tmp_path: Path, home: Path, grader: Grader
) -> None:
    sub = tmp_path / "weak-upstream"
    lt.write_weak(tmp_path / "w")
    (tmp_path / "w/02-Weak/weak-main").rename(sub)
    _git("init", "-q", cwd=sub)
    _git("add", "-A", cwd=sub)
    _git("commit", "-qm", "upstream", cwd=sub)
    commit = _git("rev-parse", "HEAD", cwd=sub)
    bench = _benchmark(tmp_path, submodule=commit, url=f"file://{sub}")
    path = fetch.fetch(bench, bench.repository)
    weak = rcb_env.load(path).paper("02-Weak")
    assert weak.unavailable is not None
    assert "submodule" in weak.unavailable
    (need,) = complete.needs(bench, path)["02-Weak"].submodules
    assert (need.commit, need.url) == (commit, f"file://{sub}")
    # a remote that does not hold the commit: refused, nothing installed
    other = tmp_path / "other"
    other.mkdir()
    _git("init", "-q", cwd=other)
    (other / "x.py").write_text("x = 1\n")
    _git("add", "-A", cwd=other)
    _git("commit", "-qm", "other", cwd=other)
    with pytest.raises(fetch.FetchError):
        complete.complete(bench, path, urls={"02-Weak/weak-main": f"file://{other}"}, lfs=False)
    assert not any((path / "02-Weak/weak-main").iterdir())
    done = complete.complete(bench, path, lfs=False)
    assert done.submodules == ("02-Weak/weak-main",)
    assert (path / "02-Weak/weak-main/mod.py").read_text() == lt.WEAK_MASKED
    weak = rcb_env.load(path).paper("02-Weak")
    assert weak.unavailable is None
    assert len(weak.snippets) == 2
    assert all(s.masked_text for s in weak.snippets)  # masked regions found in the fetched code
    # (its first test imports the golden file, by design: the second one runs the fetched code)
    verdict = grader.grade(weak, weak.snippets[1], weak.snippets[1].reference_body)
    assert verdict.passed, (verdict.detail, verdict.stderr[-800:])
    assert "02-Weak" not in complete.needs(bench, path) or not (
        complete.needs(bench, path)["02-Weak"].submodules
    )


def test_submodule_files_are_checked_against_git_object_ids(tmp_path: Path) -> None:
    sub = tmp_path / "up"
    sub.mkdir()
    (sub / "a.py").write_text("a = 1\n")
    _git("init", "-q", cwd=sub)
    _git("add", "-A", cwd=sub)
    _git("commit", "-qm", "x", cwd=sub)
    commit = _git("rev-parse", "HEAD", cwd=sub)
    # corrupt the stored object behind git's back: the extraction refuses it
    oid = _git("rev-parse", "HEAD:a.py", cwd=sub)
    loose = sub / ".git/objects" / oid[:2] / oid[2:]
    import zlib

    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 6\0a = 2\n"))
    root = tmp_path / "root"
    (root / "t").mkdir(parents=True)
    with pytest.raises(fetch.FetchError, match="do not match git's object id"):
        complete.fetch_submodule(complete.Submodule("t/up", commit, str(sub)), root)


def test_setup_assets_fetches_hub_files_with_the_hub_client_and_pins_them(
    tmp_path: Path, home: Path, hub_server: _Server
) -> None:
    pytest.importorskip("huggingface_hub")
    files = {"config.json": b'{"hidden": 4}', "model.safetensors": b"weights" * 100}
    hub_server.httpd.objects["org/tiny"] = dict(files)  # type: ignore[attr-defined]
    root = tmp_path / "pset"
    lt.write_benchmark(root)
    (root / "rcb-env.yaml").write_text(
        "papers:\n  01-Toy:\n    env:\n      HF_HOME: '{assets}/hf'\n      HF_HUB_OFFLINE: '1'\n"
        "    assets:\n      - hub: org/tiny\n"
        "        files: [config.json, pytorch_model.bin|model.safetensors, tokenizer.json?]\n"
    )
    paper = rcb_env.load(root).paper("01-Toy")
    assert envs.availability(paper).reason.startswith("its test assets are not fetched")
    # not pinned and no record: refused, with what to do
    with pytest.raises(AssetError, match="--pin"):
        envs.fetch_assets(paper, hub_endpoint=hub_server.url)
    got = envs.fetch_assets(paper, pin=True, hub_endpoint=hub_server.url)
    snap = got / "hf/hub/models--org--tiny/snapshots" / COMMIT
    assert (snap / "config.json").read_bytes() == files["config.json"]
    pin = read_pins()["hub:model:org/tiny"]
    assert pin.revision == COMMIT
    assert pin.files == {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
    assert envs.assets_ready(paper)
    assert envs.task_env(paper)["HF_HOME"] == f"{got}/hf"
    _reads_offline(got)
    # a later fetch verifies against the record: changed content is refused
    import shutil

    shutil.rmtree(got)
    hub_server.httpd.objects["org/tiny"]["model.safetensors"] = b"other"  # type: ignore[attr-defined]
    with pytest.raises(AssetError, match=r"model\.safetensors has SHA-256 .* not the pinned"):
        envs.fetch_assets(paper, hub_endpoint=hub_server.url)
    assert not envs.assets_ready(paper)
    # the recorded content again: fetched at the recorded commit, verified, readable offline
    hub_server.httpd.objects["org/tiny"]["model.safetensors"] = files["model.safetensors"]  # type: ignore[attr-defined]
    n = len(hub_server.httpd.requests)  # type: ignore[attr-defined]
    _reads_offline(envs.fetch_assets(paper, hub_endpoint=hub_server.url))
    asked = hub_server.httpd.requests[n:]  # type: ignore[attr-defined]
    assert asked
    assert all(f"/resolve/{COMMIT}/" in path for _m, path in asked)
    # a file that is neither there nor optional is an error naming it
    from rcb_env.catalog import assets

    missing = Asset(hub="org/tiny", files=("nope.bin|nope.pt",), revision=COMMIT)
    with pytest.raises(AssetError, match=r"has no file nope\.bin or nope\.pt"):
        assets.fetch(missing, tmp_path / "s", hub_endpoint=hub_server.url)


def _reads_offline(got: Path) -> None:
    """The hub client finds the files offline from there, as the test's code would."""
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from huggingface_hub import hf_hub_download; "
            "print(open(hf_hub_download('org/tiny', 'config.json')).read())",
        ],
        env={"HF_HOME": f"{got}/hf", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.stdout.strip() == '{"hidden": 4}', run.stderr


def test_url_asset_without_a_sha_is_pinned_on_first_fetch(
    tmp_path: Path, home: Path, hub_server: _Server
) -> None:
    hub_server.httpd.objects["files"] = {"w.pth": b"w" * 64}  # type: ignore[attr-defined]
    asset = Asset(url=f"{hub_server.url}/files/resolve/main/w.pth", path="torch/w.pth")
    from rcb_env.catalog import assets

    with pytest.raises(AssetError, match="not pinned"):
        assets.fetch(asset, tmp_path / "s1")
    assets.fetch(asset, tmp_path / "s2", pin=True)
    assert read_pins()[asset.key].files == {"w.pth": hashlib.sha256(b"w" * 64).hexdigest()}
    hub_server.httpd.objects["files"]["w.pth"] = b"x" * 64  # type: ignore[attr-defined]
    with pytest.raises(AssetError, match="not the pinned"):
        assets.fetch(asset, tmp_path / "s3")
    with pytest.raises(ValueError, match="commit id"):
        Asset(hub="a/b", files=("x",), revision="main")


def test_git_pinned_package_is_built_from_its_commit_into_a_cached_wheel(
    tmp_path: Path, home: Path
) -> None:
    src = tmp_path / "pkgsrc"
    (src / "tinypkg").mkdir(parents=True)
    (src / "tinypkg/__init__.py").write_text("VALUE = 'from the commit'\n")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinypkg"\nversion = "0.1"\n'
        "[tool.setuptools]\npackages = ['tinypkg']\n"
    )
    _git("init", "-q", cwd=src)
    _git("add", "-A", cwd=src)
    _git("commit", "-qm", "v", cwd=src)
    commit = _git("rev-parse", "HEAD", cwd=src)
    # a later commit changes it: the pinned one is what gets built
    (src / "tinypkg/__init__.py").write_text("VALUE = 'later'\n")
    _git("commit", "-qam", "later", cwd=src)
    with pytest.raises(rcb_env.errors.ConfigError, match="full commit id"):
        gitpkg.parse(f"tinypkg @ git+file://{src}@main")
    req = f"tinypkg @ git+file://{src}@{commit}"
    (resolved,) = gitpkg.resolve([req], Path(sys.executable), "t", isolation=False)
    wheel = Path(resolved.split("file://", 1)[1])
    assert wheel.name.startswith("tinypkg-0.1-")
    assert wheel.parent.name.startswith(f"tinypkg-{commit[:12]}")
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        assert z.read("tinypkg/__init__.py") == b"VALUE = 'from the commit'\n"
    # cached: the source can go away
    subprocess.run(["rm", "-rf", str(src)], check=True)
    assert gitpkg.resolve([req], Path(sys.executable), "t", isolation=False) == [resolved]
    bad = f"tinypkg @ git+file://{tmp_path}/nowhere@{commit}"
    with pytest.raises(gitpkg.GitPackageError):
        gitpkg.resolve([bad], Path(sys.executable), "u", isolation=False)


GIT_ENV_OVERLAY = """\
environments:
  forked:
    - "tinypkg @ git+file://{where}/tinypkg.git@{commit}"
papers:
  01-Toy:
    environment: forked
    env:
      HF_HOME: "{{assets}}/hf"
    assets:
      - hub: org/tiny
        files: [config.json]
"""


def test_setup_offline_and_tasks_needs_say_what_needs_a_network_fetch(
    tmp_path: Path, home: Path
) -> None:
    root = lt.write_benchmark(tmp_path / "pset")
    (root / "rcb-env.yaml").write_text(GIT_ENV_OVERLAY.format(where=tmp_path, commit="a" * 40))
    # a test that downloads from the hub: a blocker only while no asset is declared for it
    test = root / "02-Weak/weak-main/unit_test/unit_test_1.py"
    test.write_text("# AutoModel.from_pretrained('org/tiny')\n" + test.read_text())
    pset = rcb_env.load(root)
    assert [b.kind for b in pset.paper("02-Weak").snippets[0].blockers] == ["hub"]
    assert pset.paper("01-Toy").overlay.assets[0].hub == "org/tiny"
    result = CliRunner().invoke(cli, ["setup", str(root), "--offline"])
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if ln.startswith("01-Toy:"))
    assert "needs a network fetch first" in line
    assert "assets (setup --assets): org/tiny (1 file)" in line
    assert f"git packages (setup): tinypkg@aaaaaaaaaaaa (file://{tmp_path}/tinypkg.git)" in line
    assert not (home / "envs").exists()  # nothing was built, nothing was tried
    result = CliRunner().invoke(cli, ["tasks", "--pset", str(root), "--needs"])
    assert "runnable here: 1 of 2 papers, 1 of 5 snippets" in result.output
    assert "after both" in result.output
