"""Run the tool-calling agent against a local OpenAI-compatible server.

Here the server is rcb-env's scripted test server (it replays a fixed conversation), so this runs
anywhere without a network or an API key. Point `base_url` at vLLM, an OpenRouter-style gateway
or any OpenAI-compatible endpoint to run a real model the same way, e.g.

    rcb-env eval --agent tools --model openai:Qwen/Qwen3-32B --base-url http://localhost:8000/v1
"""

import tempfile
from pathlib import Path

from rcb_agents.models import ModelConfig
from rcb_agents.testing import Reply, ScriptedModelServer

from rcb_env import load
from rcb_env.runner import EvalConfig, run_eval
from rcb_env.task import bundled_root
from rcb_env.task.selection import select_snippets

tasks = select_snippets(load(bundled_root()), ("adamw-warmup/bias correction",))
todo = (
    '        # TODO: Implement block "bias correction"\n'
    "        # Approximately 2 line(s) of code.\n"
)
body = (
    "        m_hat = self.m / (1 - self.beta1**self.t)\n"
    "        v_hat = self.v / (1 - self.beta2**self.t)\n"
)
script = [
    Reply(tool_calls=(("read_paper", {"section": "Adam"}),)),
    Reply(tool_calls=(("replace_in_file", {"path": "optim.py", "old": todo, "new": body}),)),
    Reply(tool_calls=(("run_tests", {}),)),
    Reply(text="All tests pass.", tool_calls=(("submit", {}),)),
]
with ScriptedModelServer(script) as server, tempfile.TemporaryDirectory() as tmp:
    cfg = EvalConfig(
        agent="tools", model=ModelConfig(spec="openai:my-model", base_url=server.openai_url)
    )
    summary = run_eval(tasks, cfg, Path(tmp) / "run")
    assert summary.overall is not None
    print(f"scaled pass rate {summary.overall.scaled:.2f} with {len(server.requests)} model calls")
