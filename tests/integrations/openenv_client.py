"""Scenarios played against ``rcb-env serve`` with OpenEnv's own client (openenv-core, unchanged),
run by the interpreter of ``.venv/openenv`` (tests/integrations/test_serve.py; the acceptance
run). Prints one JSON object: what each scenario saw.

Usage: python openenv_client.py tests <base_url> <answers.json>
       python openenv_client.py oracle <base_url> <answers.json>   (every task: oracle, wrong)
"""

from __future__ import annotations

import json
import sys
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
    out["after_refusals"] = seen(c.step({"tool": "list_files"}))
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
    time.sleep(0.3)
    out["capacity_retry"] = seen(third.reset(task_id=task))["observation"]["status"]
    b.close()
    third.close()

    # connections: 4 at most; the fifth is refused at the handshake
    held = [client(url) for _ in range(4)]
    for h in held:
        h.connect()
    extra = client(url)
    out["connections"] = refused(extra.connect)
    for h in held:
        h.close()
    time.sleep(0.3)
    out["connections_after"] = refused(extra.connect)
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


def oracle(url: str, answers: dict[str, list[Any]]) -> Result:
    """Every task: the oracle's body, then a wrong one."""
    rows = []
    c = client(url)
    for task, (body, weight) in sorted(answers.items()):
        t0 = time.monotonic()
        c.reset(task_id=task)
        right = c.step({"tool": "submit", "body": body})
        c.reset(task_id=task)
        wrong = c.step({"tool": "submit", "body": wrong_body(body)})
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
    return {"rows": rows}


def main() -> None:
    mode, url, path = sys.argv[1:4]
    with open(path) as f:
        answers = json.load(f)
    result = tests(url, answers) if mode == "tests" else oracle(url, answers)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
