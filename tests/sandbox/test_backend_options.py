"""A backend's own settings are its options model: ``SandboxConfig.options`` validated for the
backend actually chosen, a clear error for a setting it does not have or one left where older
versions had it, and the command line, run files and resumed runs on the same footing.

Nothing here starts a sandbox: the fast tier.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rcb_env import config
from rcb_env.catalog.assets import Asset
from rcb_env.errors import ConfigError
from rcb_env.runner.spec import RunSpec, sandbox_settings
from rcb_env.sandbox import SandboxConfig, backend_class
from rcb_env.sandbox.backends.bwrap import BwrapBackend, BwrapExecutor, BwrapOptions
from rcb_env.sandbox.backends.docker.backend import DockerOptions
from rcb_env.sandbox.registry import check_options, comparable
from rcb_env.task import bundled_root, load
from rcb_env.task import environments as envs

MOVED = {
    "docker_base": ("docker", "my/base:1"),
    "pool_size": ("docker", 2),
    "cgroup_parent": ("bwrap", "mine"),
    "cgroup_limits": ("bwrap", "off"),
    "read_only": ("bwrap", ("/srv/cache",)),
    "cgroup_root": ("bwrap", "/sys/fs/cgroup/mine"),
}


def test_docker_options_validate_into_the_docker_model() -> None:
    cfg = SandboxConfig(backend="docker", options={"pool_size": 2})
    assert backend_class("docker").options_model is DockerOptions
    options = check_options("docker", DockerOptions, cfg.options)
    assert isinstance(options, DockerOptions)
    assert options.pool_size == 2
    assert options.docker_base == config.docker_base()  # the default, filled in
    assert cfg.options == {"docker_base": config.docker_base(), "pool_size": 2, "images": {}}


def test_a_setting_the_backend_does_not_have_is_an_error_naming_the_backend() -> None:
    with pytest.raises(ValidationError) as caught:
        SandboxConfig(backend="docker", options={"cgroup_limits": "off"})
    message = str(caught.value)
    assert "the docker backend has no option 'cgroup_limits'" in message
    assert "its options: docker_base, pool_size, images" in message
    assert "cgroup_limits is a bwrap option" in message
    with pytest.raises(ValidationError, match="the bwrap backend has no option 'no_such'"):
        SandboxConfig(backend="bwrap", options={"no_such": 1})
    with pytest.raises(ValidationError, match="the local backend has no option 'pool_size'"):
        SandboxConfig(backend="local", options={"pool_size": 1})


def test_the_backends_validators_still_apply() -> None:
    with pytest.raises(ValidationError, match="cgroup_parent must be a relative group path"):
        SandboxConfig(backend="bwrap", options={"cgroup_parent": "/abs"})
    with pytest.raises(ValidationError, match="cgroup_limits"):
        SandboxConfig(backend="bwrap", options={"cgroup_limits": "sometimes"})
    with pytest.raises(ValidationError, match="pool_size"):
        SandboxConfig(backend="docker", options={"pool_size": "many"})
    assert BwrapOptions().model_dump() == {
        "cgroup_parent": "rcb-env",
        "cgroup_limits": "required",
        "read_only": (),
        "cgroup_root": Path("/sys/fs/cgroup"),
    }
    with pytest.raises(ValidationError, match="frozen"):
        BwrapOptions().cgroup_limits = "off"  # type: ignore[misc]


@pytest.mark.parametrize("field", sorted(MOVED))
def test_a_backend_setting_at_the_top_level_says_where_it_goes(field: str) -> None:
    backend, value = MOVED[field]
    with pytest.raises(ValidationError) as caught:
        SandboxConfig(**{field: value})
    assert f"{field} is a {backend} option: SandboxConfig(options={{{field!r}: {value!r}}})" in (
        str(caught.value)
    )
    assert field not in SandboxConfig.model_fields


def test_auto_keeps_its_options_and_the_backend_it_resolves_to_checks_them(
    tmp_path: Path,
) -> None:
    """``auto`` cannot know its backend's model until it is resolved: the options are kept as
    given, and bwrap (what auto picks) reads them; a setting bwrap lacks is refused then."""
    cfg = SandboxConfig(options={"cgroup_limits": "off"})
    assert cfg.options == {"cgroup_limits": "off"}
    backend = BwrapBackend(cfg, tmp_path)  # "off": no cgroup is checked or swept
    try:
        assert backend.options == BwrapOptions(cgroup_limits="off")
    finally:
        backend.close()
    with pytest.raises(ConfigError, match="the bwrap backend has no option 'pool_size'"):
        BwrapBackend(SandboxConfig(options={"pool_size": 2}), tmp_path)


def test_bwrap_options_reach_its_executors_with_the_papers_asset_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A paper's asset cache, once fetched, is bound read-only next to the folders the user
    gave (not fetched: nothing to bind, and the paper is unavailable)."""
    monkeypatch.setenv("RCB_ENV_HOME", str(tmp_path / "home"))
    paper = load(bundled_root()).paper("adamw-warmup")
    paper = paper.model_copy(
        update={
            "overlay": paper.overlay.model_copy(
                update={"assets": (Asset(url="file:///x", sha256="0" * 64, path="x"),)}
            )
        }
    )
    cfg = SandboxConfig(
        backend="bwrap",
        options={"cgroup_limits": "off", "read_only": ["/srv/cache"], "cgroup_parent": "mine"},
        python=config.task_python(),
        user=None,
        warm_grading=False,
    )
    backend = BwrapBackend(cfg, tmp_path)
    try:
        executor = backend.grading_executor(paper)
        assert isinstance(executor, BwrapExecutor)
        assert executor.options.read_only == (Path("/srv/cache"),)
        envs.asset_root(paper).mkdir(parents=True)
        (envs.asset_root(paper) / envs.READY).write_text("x")
        executor = backend.grading_executor(paper)
        assert isinstance(executor, BwrapExecutor)
        assert executor.options.read_only == (Path("/srv/cache"), envs.asset_root(paper))
        assert executor.options.cgroup_limits == "off"
        assert executor.options.cgroup_parent == "mine"
        assert backend.options.read_only == (Path("/srv/cache"),)  # the backend's own: unchanged
    finally:
        backend.close()


def _sandbox_config(
    backend: str,
    base: str | None,
    pool: int = 0,
    cgroup_limits: str | None = None,
    grading: str = "warm",
) -> SandboxConfig:
    """The command line's sandbox flags, through the one mapping."""
    shorthands = {"base": base, "pool": pool, "cgroup_limits": cgroup_limits}
    return sandbox_settings(backend, grading=grading, shorthands=shorthands)


def test_the_command_line_and_run_files_fill_the_backends_options(tmp_path: Path) -> None:
    docker = _sandbox_config("docker", "my/base:1", pool=2)
    assert docker.options == {"docker_base": "my/base:1", "pool_size": 2, "images": {}}
    assert _sandbox_config("bwrap", None, cgroup_limits="off").options["cgroup_limits"] == "off"
    assert _sandbox_config("auto", None).options == {}
    assert not _sandbox_config("auto", None, grading="cold").warm_grading
    with pytest.raises(ConfigError, match="the bwrap backend has no option 'docker_base'"):
        _sandbox_config("bwrap", "my/base:1")
    with pytest.raises(ConfigError, match="the docker backend has no option 'cgroup_limits'"):
        _sandbox_config("docker", None, cgroup_limits="off")
    run_file = tmp_path / "run.yaml"
    run_file.write_text("agent: oracle\nsandbox: docker\nbase: my/base:1\npool: 3\n")
    assert RunSpec.load(run_file).sandbox_config().options == {
        "docker_base": "my/base:1",
        "pool_size": 3,
        "images": {},
    }
    run_file.write_text("agent: oracle\nsandbox: bwrap\ncgroup_limits: best-effort\n")
    spec = RunSpec.load(run_file)
    assert spec.eval_config().sandbox.options["cgroup_limits"] == "best-effort"


def test_a_run_made_before_the_options_moved_compares_equal_when_resumed() -> None:
    """A manifest of an older version has every backend's settings at the top level of the
    sandbox config; the same command today makes the same config."""
    older = {
        "backend": "docker",
        "limits": SandboxConfig().limits.model_dump(mode="json"),
        "command_timeout_s": 120.0,
        "output_limit": 20000,
        "user": "rcb-sandbox",
        "python": None,
        "docker_base": "my/base:1",
        "pool_size": 2,
        "cgroup_parent": "rcb-env",
        "cgroup_limits": "required",
        "read_only": [],
        "env": {},
        "warm_grading": True,
        "warm_processes": 4,
        "cgroup_root": "/sys/fs/cgroup",
    }
    today = _sandbox_config("docker", "my/base:1", pool=2).model_dump(mode="json")
    assert comparable(older) == comparable(today)
    assert comparable(older) != comparable(_sandbox_config("docker", "my/base:1").model_dump())
    auto_older = {**older, "backend": "auto", "cgroup_limits": "off"}
    auto_today = _sandbox_config("auto", None, cgroup_limits="off").model_dump(mode="json")
    assert comparable(auto_older) == comparable(auto_today)
    explicit_default = _sandbox_config("auto", None, cgroup_limits="required")
    assert comparable({**older, "backend": "auto"}) == comparable(
        explicit_default.model_dump(mode="json")
    )
