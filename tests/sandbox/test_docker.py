"""Docker specifics: images (content, tags, no rebuild), leftovers, the warm pool, the CLI."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rcb_env import config
from rcb_env.results import read_records, summarize
from rcb_env.sandbox import SandboxConfig, SandboxFactory
from rcb_env.sandbox.backends.docker import engine as docker_engine
from rcb_env.sandbox.backends.docker import images
from rcb_env.sandbox.backends.docker.engine import LABEL_ROLE
from rcb_env.sandbox.backends.docker.images import LABEL
from rcb_env.task import bundled_root, load


def _ours(engine: Any) -> list[dict[str, Any]]:
    return docker_engine.list_containers(engine, LABEL_ROLE)


def test_image_has_the_interpreter_and_deps_but_no_task_files(docker_images: str) -> None:
    engine = docker_engine.client()
    paper = load(bundled_root()).paper("adamw-warmup")
    tag = images.image_tag(paper, images.ImageConfig(base=docker_images))
    script = (
        "import numpy, os, sys; print(sys.executable, numpy.__version__);"
        "names = [f for _, _, fs in os.walk('/') for f in fs];"
        "print(sum(n in ('paper2code_test.py', 'optim_ref.py', 'optim.py') for n in names))"
    )
    out = engine.containers.run(tag, ["python", "-c", script], remove=True, network_mode="none")
    exe, _version, count = out.decode().split()
    assert exe == docker_engine.INTERPRETER
    assert count == "0"
    image = engine.images.get(tag)
    assert image.labels[LABEL] == "1"


def test_an_up_to_date_image_is_not_rebuilt_and_tags_follow_content(docker_images: str) -> None:
    engine = docker_engine.client()
    paper = load(bundled_root()).paper("adamw-warmup")
    cfg = images.ImageConfig(base=docker_images)
    start = time.monotonic()
    tag, built = images.build(engine, paper, cfg)
    assert not built
    assert time.monotonic() - start < 5
    other = images.image_tag(paper, images.ImageConfig(base="python:3.12-slim"))
    assert other != tag
    assert tag.startswith("rcb-env/paper-adamw-warmup:")


def test_missing_image_is_a_clear_error(docker_images: str) -> None:
    from rcb_env.errors import SandboxError

    paper = load(bundled_root()).paper("rmsnorm-swiglu")  # torch: never built in CI
    f = SandboxFactory(SandboxConfig(backend="docker", options={"docker_base": docker_images}))
    try:
        with pytest.raises(SandboxError, match="rcb-env images build"):
            f.create(paper, paper.snippets[0])
    finally:
        f.close()


def test_containers_of_images_built_from_a_paper_image_are_not_ours(docker_images: str) -> None:
    """A Harbor task's image is built FROM a paper image and inherits its labels: its containers
    are someone else's, never listed as rcb-env's leftovers nor removed by the clean-up."""
    engine = docker_engine.client()
    paper = load(bundled_root()).paper("adamw-warmup")
    parent = images.image_tag(paper, images.ImageConfig(base=docker_images))
    child = "rcb-env-test/from-a-paper-image:1"
    engine.images.build(
        fileobj=io.BytesIO(f"FROM {parent}\nRUN true\n".encode()), tag=child, rm=True
    )
    container = engine.containers.create(child, command=["true"])
    try:
        assert images.LABEL in (engine.images.get(child).labels or {})  # inherited
        assert container.id not in {c["Id"] for c in _ours(engine)}
        docker_engine.gc_containers(engine, everything=True)
        container.reload()  # still there
    finally:
        container.remove(force=True)
        engine.images.remove(child, force=True)


def test_warm_pool_hands_out_started_containers(docker_images: str) -> None:
    paper = load(bundled_root()).paper("adamw-warmup")
    f = SandboxFactory(
        SandboxConfig(backend="docker", options={"docker_base": docker_images, "pool_size": 2})
    )
    try:
        f.warm([paper])
        deadline = time.monotonic() + 60
        engine = docker_engine.client()
        while time.monotonic() < deadline and len(_ours(engine)) < 2:
            time.sleep(0.1)
        with f.create(paper, paper.snippet("bias correction")) as sb:
            assert sb.exec("echo pooled").stdout == "pooled\n"
    finally:
        f.close()
    mine = docker_engine.owner_label()
    assert all(
        c["Labels"].get(docker_engine.LABEL_OWNER) != mine for c in _ours(docker_engine.client())
    )


def _eval(*args: str) -> list[str]:
    return [sys.executable, "-m", "rcb_env", *args]


@pytest.mark.slow
def test_cli_eval_docker_scores_and_leaves_nothing_even_after_sigkill(
    docker_images: str, tmp_path: Path
) -> None:
    env = {**os.environ, "RCB_TASK_PYTHON": str(config.task_python())}
    common = ["--sandbox", "docker", "--base", docker_images, "--paper", "adamw-warmup"]
    engine = docker_engine.client()
    results = {}
    for agent in ("oracle", "null"):
        run = tmp_path / agent
        subprocess.run(
            _eval("eval", "--agent", agent, *common, "--resume", str(run)),
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        s = summarize(read_records(run / "episodes.jsonl"))
        assert s.overall is not None
        results[agent] = (s.overall.scaled, s.infra_errors)
    assert results == {"oracle": (100.0, 0), "null": (0.0, 0)}
    assert _ours(engine) == []
    # Killed in the middle of a run: containers stay until `images gc`.
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        _eval("eval", "--agent", "oracle", *common, "--jobs", "2", "--resume", str(killed)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _ours(engine):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _settle(engine)
    subprocess.run(
        _eval("images", "gc", "--base", docker_images), env=env, check=True, capture_output=True
    )
    assert _ours(engine) == []


def _settle(engine: Any, quiet_s: float = 3.0, limit_s: float = 60.0) -> None:
    """Wait until the engine's list of our containers has not changed for ``quiet_s``: requests
    the killed client sent just before it died (a create, a start) are still being carried out,
    and a container they make after `images gc` looked would be left."""
    seen: list[tuple[str, str]] = []
    quiet_since = time.monotonic()
    deadline = quiet_since + limit_s
    while time.monotonic() < deadline:
        now = sorted((c["Id"], c["State"]) for c in _ours(engine))
        if now != seen:
            seen, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        time.sleep(0.2)


def test_an_unreachable_engine_is_a_clear_sandbox_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rcb_env.errors import SandboxError
    from rcb_env.sandbox import resolve_backend

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert docker_engine.probe() is not None
    with pytest.raises(SandboxError, match="no engine answers"):
        resolve_backend("docker")


def test_images_gc_removes_only_the_selected_papers_stale_images(docker_images: str) -> None:
    """`images gc` for one benchmark keeps another benchmark's images (they are not stale: the
    published papers' images took a quarter of an hour to build) and removes the selection's
    stale ones."""
    engine = docker_engine.client()
    paper = load(bundled_root()).paper("adamw-warmup")
    current = images.image_tag(paper, images.ImageConfig(base=docker_images))
    env_tag = (engine.images.get(current).labels or {})[images.LABEL_ENV]
    made = {
        f"{images.REPOSITORY}-adamw-warmup:stale-test": "adamw-warmup",
        f"{images.REPOSITORY}-other-benchmark:gc-test": "other-benchmark/paper",
    }
    for tag, paper_id in made.items():
        engine.images.build(
            fileobj=io.BytesIO(f"FROM {current}\nLABEL {images.LABEL_PAPER}={paper_id}\n".encode()),
            tag=tag,
            rm=True,
        )
    try:
        removed = images.gc_images(engine, {current}, {"adamw-warmup"})
        assert f"{images.REPOSITORY}-adamw-warmup:stale-test" in removed
        assert not images.image_exists(engine, f"{images.REPOSITORY}-adamw-warmup:stale-test")
        assert images.image_exists(engine, f"{images.REPOSITORY}-other-benchmark:gc-test")
        assert images.image_exists(engine, current)
        assert images.image_exists(engine, env_tag)
    finally:
        for tag in made:
            if images.image_exists(engine, tag):
                engine.images.remove(tag, force=True)
