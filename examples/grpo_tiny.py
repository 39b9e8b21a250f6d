"""A real GRPO training run through rcb-env on CPU: TRL's ``GRPOTrainer`` trains a tiny Qwen2
model, randomly initialised and built here offline (its tokenizer is a byte-level BPE trained on
a few lines, with Qwen 2.5's chat template so that TRL parses its tool calls), for a few steps
on the bundled tasks, each rollout an rcb-env episode in a bwrap sandbox (the paper's outline in
the prompt). It prints the reward and the loss of every step.

The model is far too small to solve anything: its rewards are 0 (graded as the workspace
stands when it stops without submitting); the point is the whole path, end to end, on the
machine you have. For a real model on a GPU, see docs/rl.md ("A real run").

Run: .venv/bin/python examples/grpo_tiny.py [--steps 3]   (or ``make grpo-example``)

Training apart from the test set (docs/synth.md): ``--train-pset DIR`` trains on a synthesised
pset (``rcb-env synth``; ``--task ID`` picks its tasks, default the first two, or
``--subset level:easy`` its easy ones), then ``--eval-pset researchcodebench --eval-task ID``
plays the trained model on published snippets (rcb-env's rollout, the model as its policy) and
prints each reward. A training task its set's manifest names as the test set is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

PRETEXT = (
    "<tool_call> </tool_call> submit read_file list_files run_tests read_paper search "
    '{"name": "submit", "arguments": {}} def return import torch self x = y + 1 '
    "The task: implement the masked block of the paper's repository. Tools, files, tests."
)


def tiny_model() -> tuple[Any, Any]:
    """A randomly initialised tiny Qwen2 causal LM and its tokenizer, made without any
    download."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from trl.chat_template_utils import qwen2_5_chat_template

    from rcb_env.agent import tools_system_prompt
    from rcb_env.rl.rollout import openai_tools

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    # what every prompt holds (the system text, the tools' schemas): few tokens per prompt
    corpus = [
        PRETEXT,
        tools_system_prompt(),
        json.dumps(openai_tools()),
        json.dumps(openai_tools(), indent=4),
    ]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1500,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(corpus * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=qwen2_5_chat_template,
    )
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32_768,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def train(
    folder: Path,
    *,
    steps: int,
    task_ids: list[str],
    environment_factory: Callable[[], Any],
    generations: int = 4,
    prompts: int = 1,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    pset: str | None = None,
    model: tuple[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """``steps`` GRPO steps of the tiny model (or ``model``: a model and its tokenizer) over
    ``task_ids`` of ``pset`` (default: the bundled tasks; ``generations`` rollouts per task,
    ``prompts`` tasks per step); TRL's log history."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rcb_env.integrations.trl import dataset_rows

    model, tokenizer = model or tiny_model()
    rows = [r for r in dataset_rows(pset) if r["task_id"] in task_ids]
    if not rows:
        raise SystemExit(f"no task of {task_ids} in {pset or 'the bundled tasks'}")
    args = GRPOConfig(
        output_dir=str(folder / "out"),
        max_steps=steps,
        per_device_train_batch_size=generations * prompts,
        num_generations=generations,
        max_completion_length=24,
        max_tool_calling_iterations=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        dataloader_num_workers=0,
        log_completions=False,
    )

    class Printer(TrainerCallback):  # type: ignore[misc]
        def on_log(self, _args: Any, state: Any, _control: Any, logs: Any = None, **_: Any) -> None:
            if on_step is not None and logs and "loss" in logs:
                on_step({"step": state.global_step, **logs})

    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=Dataset.from_list(rows),
        environment_factory=environment_factory,
        callbacks=[Printer()],
    )
    trainer.train()
    history: list[dict[str, Any]] = trainer.state.log_history
    return history


class TinyPolicy:
    """The trained model as rcb-env's rollout policy: the chat template with the tools, a short
    greedy completion, its ``<tool_call>`` blocks as tool calls. Its byte-level vocabulary makes
    a paper's outline tens of thousands of tokens: it reads the last ``context`` of them."""

    def __init__(
        self, model: Any, tokenizer: Any, max_new_tokens: int = 24, context: int = 4096
    ) -> None:
        self.model, self.tokenizer, self.max_new_tokens = model, tokenizer, max_new_tokens
        self.context = context

    async def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        import asyncio

        return await asyncio.to_thread(self._generate, messages, tools)

    def _generate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        import re

        import torch

        from rcb_env.rl.policy import PolicyOutput

        ids = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, return_tensors="pt"
        )
        ids = ids["input_ids"] if not isinstance(ids, torch.Tensor) else ids
        ids = ids[:, -self.context :]
        with torch.no_grad():
            out = self.model.generate(ids, max_new_tokens=self.max_new_tokens, do_sample=False)
        text = self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=False)
        calls = []
        for i, body in enumerate(re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S)):
            try:
                call = json.loads(body)
                name, arguments = str(call["name"]), call.get("arguments", {})
            except (ValueError, KeyError, TypeError):
                continue
            calls.append(
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return PolicyOutput(message=message, finish_reason="stop")


def evaluate(
    model: tuple[Any, Any], pset: str, task_ids: list[str], config: Any
) -> list[tuple[str, float | None]]:
    """Each task of ``pset`` played once by the trained model (rcb-env's rollout): its reward
    (None: not scored)."""
    import asyncio

    from rcb_env.rl.rollout import RolloutConfig, rollout
    from rcb_env.task import load

    tasks = load(pset)
    policy = TinyPolicy(*model)
    out = []
    for task_id in task_ids:
        paper_id, _, name = task_id.partition("/")
        paper = tasks.paper(paper_id)
        trajectory = asyncio.run(
            rollout(paper, paper.snippet(name), policy, config=RolloutConfig(episode=config))
        )
        out.append((task_id, trajectory.reward))
    return out


def main() -> None:
    from rcb_env import config
    from rcb_env.episode import BudgetConfig, EnvConfig, EpisodeConfig
    from rcb_env.grading import GradingConfig
    from rcb_env.integrations.trl import environment_factory
    from rcb_env.sandbox import SandboxConfig
    from rcb_env.synth.manifest import read as read_manifest
    from rcb_env.synth.manifest import select as synth_select
    from rcb_env.task import load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--train-pset", help="Train on this pset (default: the bundled tasks).")
    parser.add_argument("--task", action="append", default=[], help="A training task id.")
    parser.add_argument("--subset", help="A synthesised set's subset (level:easy, ...).")
    parser.add_argument("--eval-pset", help="Then play the trained model on this pset's tasks.")
    parser.add_argument("--eval-task", action="append", default=[], help="An evaluation task.")
    ns = parser.parse_args()
    bundled = ns.train_pset is None
    if bundled:  # the bundled tasks run under the installer's task interpreter
        sandbox = SandboxConfig(backend="bwrap", python=config.task_python())
        grading = GradingConfig(python=config.task_python(), timeout_s=120)
    else:  # a benchmark's papers under their own environments
        sandbox, grading = SandboxConfig(backend="bwrap"), GradingConfig()
    episode = EpisodeConfig(
        env=EnvConfig(paper_in_prompt="outline"),
        sandbox=sandbox,
        grading=grading,
        budgets=BudgetConfig(max_steps=4, max_wall_s=None),  # 4 tool calls
    )
    factory = environment_factory(ns.train_pset, config=episode)
    tasks = ns.task or ["adamw-warmup/bias correction", "rmsnorm-swiglu/root mean square"]
    if not bundled and not ns.task:
        train_set = load(ns.train_pset)
        if ns.subset:
            train_set = synth_select(train_set, ns.subset)
        tasks = [s.id for s in train_set.snippets][:2]
    if ns.train_pset is not None:  # a training set names its test set: never train on it
        record = read_manifest(Path(ns.train_pset))
        held = set(record.test_set.snippets) if record is not None else set()
        if held & set(tasks):
            raise SystemExit(f"training on the test set: {sorted(held & set(tasks))}")
    t0 = time.monotonic()

    def show(logs: dict[str, Any]) -> None:
        print(
            f"step {logs['step']}: reward {logs.get('reward', float('nan')):.3f}, "
            f"loss {logs['loss']:.4f}, {time.monotonic() - t0:.0f} s",
            flush=True,
        )

    print(f"training on {ns.train_pset or 'the bundled tasks'}: {', '.join(tasks)}", flush=True)
    model = tiny_model()
    with tempfile.TemporaryDirectory(prefix="rcb-grpo-") as tmp:
        history = train(
            Path(tmp),
            steps=ns.steps,
            task_ids=tasks,
            environment_factory=factory,
            prompts=min(2, len(tasks)),
            on_step=show,
            pset=ns.train_pset,
            model=model,
        )
    steps = sum(1 for h in history if "loss" in h)
    print(f"trained {steps} steps in {time.monotonic() - t0:.0f} s")
    if ns.eval_pset is not None:
        # the same episodes, with at most 4 model turns (the tiny model never submits)
        budgets = episode.budgets.model_copy(update={"max_model_calls": 4})
        played = episode.model_copy(update={"budgets": budgets})
        for task_id, reward in evaluate(model, ns.eval_pset, ns.eval_task, played):
            shown = "not scored" if reward is None else f"{reward:.3f}"
            print(f"evaluated on {ns.eval_pset} {task_id}: reward {shown}", flush=True)
        print(f"done in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
