"""Scenarios played against ``rcb-env serve`` with OpenEnv's own client (openenv-core, unchanged),
run by the interpreter of ``.venv/openenv`` (tests/integrations/test_serve.py; the acceptance
run). Prints one JSON object: what each scenario saw.

Usage: python openenv_client.py tests <base_url> <answers.json>
       python openenv_client.py oracle <base_url> <answers.json> [jobs]   (every task: the
       oracle's body, then a wrong one)
       python openenv_client.py latency <base_url> <task>   (benchmarks/bench_serve.py: one
       reset + step per line read, a JSON line each)
       python openenv_client.py many <base_url> <task> <n> [command]
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.parse
from typing import Any

from openenv.core import GenericEnvClient  # type: ignore[import-not-found,unused-ignore]

Result = dict[str, Any]


def client(url: str) -> Any:
    return GenericEnvClient(base_url=url, message_timeout_s=300).sync()


def seen(result: Any) -> Result:
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


def refused(call: Any) -> str:
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


def wrong_body(body: str) -> str:
    """A body that runs and fails the tests: ``pass`` at the reference's indentation."""
    return body[: len(body) - len(body.lstrip())] + "pass\n"


def retried(call: Any, refusal: str, within_s: float = 20) -> Any:
    """``call()`` again while it is refused with ``refusal`` (the server frees a slot as soon as
    it has handled the other client's close; on a loaded machine that takes a moment)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return call()
        except Exception as exc:
            if refusal not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def failing_body(body: str) -> str:
    """A body that raises where it runs, at the reference's indentation."""
    indent = body[: len(body) - len(body.lstrip())].rpartition("\n")[2]
    return f'{indent}raise RuntimeError("a wrong body")\n'


def tests(url: str, answers: dict[str, list[Any]]) -> Result:
    out: Result = {}
    task = "scaled-attention/softmax"
    body, _weight = answers[task]
    c = client(url)
    c.connect()
    out["reset"] = seen(c.reset(task_id=task))
    out["list_tools"] = seen(c.step({"type": "list_tools"}))
    out["bad_action"] = seen(c.step({"tool": "frobnicate"}))
    out["unknown_task"] = refused(lambda: c.reset(task_id="no/such"))
    out["unknown_reset_key"] = refused(lambda: c.reset(task_id=task, level=3))
    call = {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5], "logprobs": [-0.1, -0.2]}
    out["after_refusals"] = seen(c.step({"tool": "list_files", "metadata": {"model_call": call}}))
    out["oracle"] = seen(c.step({"tool": "submit", "body": body}))
    out["state_after"] = dict(c.state())
    out["step_after_end"] = seen(c.step({"tool": "list_files"}))
    out["reset_wrong"] = seen(c.reset(task_id=task))
    out["wrong"] = seen(c.step({"tool": "submit", "body": wrong_body(body)}))
    out["seeded"] = [seen(c.reset(seed=7))["observation"]["task_id"] for _ in range(2)]
    c.close()  # an episode still running: recorded as interrupted

    # capacity: the server holds 2 open episodes; a third reset is refused, the same socket
    # gets one once a slot is free
    a, b, third = client(url), client(url), client(url)
    a.reset(task_id=task)
    b.reset(task_id=task)
    out["capacity"] = refused(lambda: third.reset(task_id=task))
    a.close()
    again = retried(lambda: third.reset(task_id=task), "CAPACITY_REACHED")
    out["capacity_retry"] = seen(again)["observation"]["status"]
    b.close()
    third.close()

    # connections: 4 at most; the fifth is refused at the handshake
    held = [client(url) for _ in range(4)]
    for h in held:  # (the sockets closed above may still be leaving)
        retried(h.connect, "HTTP 503")
    extra = client(url)
    out["connections"] = refused(extra.connect)
    for h in held:
        h.close()
    out["connections_after"] = refused(lambda: retried(extra.connect, "HTTP 503"))
    extra.close()

    # the token: the base URL without it is refused; the token as the URL's password works
    parts = urllib.parse.urlsplit(url)
    token = parts.path.strip("/")
    bare = f"{parts.scheme}://{parts.netloc}"
    out["no_token"] = refused(lambda: client(bare).connect())
    out["wrong_token"] = refused(lambda: client(bare + "/not-the-token").connect())
    with_password = f"{parts.scheme}://rcb:{token}@{parts.netloc}"
    d = client(with_password)
    out["user_info"] = seen(d.reset(task_id=task))["observation"]["status"]
    d.close()
    return out


def oracle(url: str, answers: dict[str, list[Any]], jobs: int = 2) -> Result:
    """Every task: the oracle's body, then one that raises (``jobs`` clients at once). Not the
    masked block as given: 4 published snippets' tests pass it (the null agent's known 4)."""
    tasks = sorted(answers.items())
    rows: list[Result] = []

    def play(share: list[tuple[str, list[Any]]]) -> None:
        c = client(url)
        for task, (body, weight) in share:
            t0 = time.monotonic()
            try:
                c.reset(task_id=task)
                right = c.step({"tool": "submit", "body": body})
                c.reset(task_id=task)
                wrong = c.step({"tool": "submit", "body": failing_body(body)})
            except Exception as exc:  # a lost connection: the row says so
                rows.append({"task": task, "weight": weight, "error": repr(exc)})
                c.close()
                c = client(url)
                continue
            rows.append(
                {
                    "task": task,
                    "weight": weight,
                    "reward": right.reward,
                    "status": right.observation["status"],
                    "wrong_reward": wrong.reward,
                    "wrong_status": wrong.observation["status"],
                    "s": round(time.monotonic() - t0, 2),
                }
            )
        c.close()

    threads = [threading.Thread(target=play, args=(tasks[i::jobs],)) for i in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"rows": sorted(rows, key=lambda r: str(r["task"]))}


def latency(url: str, task: str) -> None:
    """Reset + a ``read_file`` step, once per line read from stdin (each on a fresh connection,
    closed after: the episode ends unscored, nothing graded): prints the two calls'
    milliseconds. At an empty line: the round trip of a ``state`` frame (no episode work: the
    protocol's own cost, client included), p50 of 200."""
    for line in sys.stdin:
        if not line.strip():
            break
        c = client(url)
        c.connect()
        t0 = time.perf_counter()
        c.reset(task_id=task)
        c.step({"tool": "read_file", "path": "attention/core.py"})
        print(json.dumps({"ms": (time.perf_counter() - t0) * 1000}), flush=True)
        c.close()
    c = client(url)
    c.reset(task_id=task)
    times = []
    for _ in range(220):
        t0 = time.perf_counter()
        c.state()
        times.append((time.perf_counter() - t0) * 1000)
    c.close()
    print(json.dumps({"state_ms": sorted(times[20:])[100]}), flush=True)


def many(url: str, task: str, n: int, command: bool) -> Result:
    """``n`` sessions open at once, each with an episode: a step answered for each (a
    ``read_file``, or with ``command`` a ``run_command``, which starts the episode's shell)."""
    import asyncio

    async def go() -> Result:
        clients = [GenericEnvClient(base_url=url, message_timeout_s=300) for _ in range(n)]
        t0 = time.monotonic()
        await asyncio.gather(*(c.connect() for c in clients))
        await asyncio.gather(*(c.reset(task_id=task) for c in clients))
        opened = time.monotonic() - t0
        action = (
            {"tool": "run_command", "command": "echo ok"}
            if command
            else {"tool": "read_file", "path": "attention/core.py"}
        )
        t1 = time.monotonic()
        steps = await asyncio.gather(*(c.step(action) for c in clients), return_exceptions=True)
        stepped = time.monotonic() - t1
        answered = sum(
            1 for r in steps if not isinstance(r, BaseException) and r.observation["tool_ok"]
        )
        print(json.dumps({"open": n}), flush=True)
        sys.stdin.readline()  # the caller measures the server now
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        return {"n": n, "answered": answered, "open_s": opened, "step_s": stepped}

    return asyncio.run(go())


def main() -> None:
    mode, url, path, *rest = sys.argv[1:]
    if mode == "latency":
        latency(url, path)
        return
    if mode == "many":
        print(json.dumps(many(url, path, int(rest[0]), rest[1:] == ["command"])))
        return
    with open(path) as f:
        answers = json.load(f)
    jobs = int(rest[0]) if rest else 2
    result = tests(url, answers) if mode == "tests" else oracle(url, answers, jobs)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
