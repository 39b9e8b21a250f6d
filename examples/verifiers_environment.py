"""rcb-env in verifiers' own eval path: verifiers loads the taskset package ``rcb_verifiers``,
runs the rollout in its in-house ``null`` harness (its chat program, here in a subprocess
runtime), and the harness works the episode through rcb-env's MCP server. The model is the
scripted server of ``rcb_agents.testing`` playing the oracle (a real run names a model and an
OpenAI-compatible endpoint instead: ``vf-eval rcb_verifiers -m MODEL ...``).

Run: .venv/bin/python examples/verifiers_environment.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from rcb_agents.testing import Reply, ScriptedModelServer
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig

from rcb_env import config
from rcb_env.integrations.verifiers import offline_harness_env
from rcb_env.task import bundled_root, load


def main() -> None:
    snippet = load(bundled_root()).paper("adamw-warmup").snippet("bias correction")
    # the harness program from the wheels scripts/install.sh downloaded; uv from this venv
    os.environ.update(offline_harness_env(config.rcb_home() / "wheels" / "verifiers-harness"))
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    os.environ.setdefault("SCRIPTED_KEY", "unused")
    edit = {"path": snippet.file, "old": snippet.todo_body(), "new": snippet.reference_body}
    script = [  # the harness names each tool after its server: rcb_<tool>
        Reply(tool_calls=(("rcb_replace_in_file", edit),)),
        Reply(tool_calls=(("rcb_submit", {}),)),
        Reply(text="done"),
    ]
    with tempfile.TemporaryDirectory() as out, ScriptedModelServer(script) as server:
        cfg = EvalConfig.model_validate(
            {
                "env": {
                    "taskset": {"id": "rcb_verifiers", "snippets": [snippet.id]},
                    "agent": {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}},
                },
                "model": "scripted",
                "client": {"base_url": server.openai_url, "api_key_var": "SCRIPTED_KEY"},
                "push": False,
                "rich": None,
                "output_dir": out,
            }
        )
        (episode,) = asyncio.run(run_eval(cfg))
    (trace,) = episode.traces
    reward = trace.rewards["rcb_reward"].score
    print(f"rcb_reward {reward} (line weight {snippet.weight}), errors {len(trace.errors)}")


if __name__ == "__main__":
    main()
