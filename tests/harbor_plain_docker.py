# mypy: ignore-errors
"""A Harbor environment on a plain Docker engine (the ``docker`` command: build, run, exec, cp),
for engines without the Docker Compose v2 plugin that Harbor's own ``docker`` environment drives
(``docker compose``; Debian bookworm packages only compose v1). Ours, written for the tests:
``harbor run -e harbor_plain_docker:PlainDocker`` with this folder on PYTHONPATH. It runs in
Harbor's interpreter (the Harbor venv), not rcb-env's; everything else of the run (the job, the
trial, the oracle agent, the verifier and its reward files) is Harbor's own.

Its containers never have a network (``--network none``), which is at least as strict as any
policy a task asks for, so it can take every phase's policy (an exported task's agent phase is
``no-network``): it records each switch Harbor asks for in the trial's
``network-policies.log`` for the tests to read.
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities


async def _docker(*args: str, timeout: float | None = None, check: bool = True) -> ExecResult:
    proc = await asyncio.create_subprocess_exec(
        "docker",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return ExecResult(stdout="", stderr=f"timed out after {timeout} s", return_code=124)
    result = ExecResult(
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        return_code=proc.returncode or 0,
    )
    if check and result.return_code != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])} failed: {result.stderr.strip()[-500:]}")
    return result


class PlainDocker(BaseEnvironment):
    @staticmethod
    def type() -> str:
        return "rcb-plain-docker"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True, dynamic_network_policy=True)

    async def _apply_network_policy(self, network_policy) -> None:
        with (self.trial_paths.trial_dir / "network-policies.log").open("a") as log:
            log.write(f"{network_policy.network_mode.value}\n")

    def _validate_definition(self):
        if not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(f"{self.environment_dir / 'Dockerfile'} not found")

    @property
    def _container(self) -> str:
        return "hb-" + self.session_id.lower().replace("_", "-")[:60]

    @property
    def _image(self) -> str:
        digest = hashlib.sha256(str(self.environment_dir.resolve()).encode()).hexdigest()[:12]
        return f"hb-{self.environment_name.lower()[:40]}:{digest}"

    async def start(self, force_build: bool) -> None:
        have = await _docker("image", "inspect", self._image, check=False)
        if force_build or have.return_code != 0:
            await _docker("build", "-q", "-t", self._image, str(self.environment_dir))
        await _docker(
            "run", "-d", "--name", self._container, "--network", "none", self._image,
            "sleep", "infinity",
        )  # fmt: skip
        await self.exec("mkdir -p /logs/agent /logs/verifier /logs/artifacts", user="root")

    async def stop(self, delete: bool):
        await _docker("rm", "-f", self._container, check=False)
        if delete:  # the task's image (the paper's image below it stays)
            await _docker("rmi", "-f", self._image, check=False)

    async def upload_file(self, source_path: Path | str, target_path: str):
        parent = str(Path(target_path).parent)
        await self.exec(f"mkdir -p {shlex.quote(parent)}", user="root")
        await _docker("cp", str(source_path), f"{self._container}:{target_path}")

    async def upload_dir(self, source_dir: Path | str, target_dir: str):
        await self.exec(f"mkdir -p {shlex.quote(target_dir)}", user="root")
        await _docker("cp", f"{source_dir}/.", f"{self._container}:{target_dir}")

    async def download_file(self, source_path: str, target_path: Path | str):
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        await _docker("cp", f"{self._container}:{source_path}", str(target_path))

    async def download_dir(self, source_dir: str, target_dir: Path | str):
        Path(target_dir).mkdir(parents=True, exist_ok=True)
        await _docker("cp", f"{self._container}:{source_dir}/.", str(target_dir))

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        args = ["exec"]
        if cwd:
            args += ["-w", cwd]
        for key, value in {**self._persistent_env, **(env or {})}.items():
            args += ["-e", f"{key}={value}"]
        who = user if user is not None else self.default_user
        if who is not None:
            args += ["-u", str(who)]
        args += [self._container, "bash", "-c", command]
        return await _docker(*args, timeout=timeout_sec, check=False)
