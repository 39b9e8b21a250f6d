"""Runs inside the sandbox, under the paper's own interpreter (standard library only; numpy and
torch used when the paper's code hands them over): is a surviving mutant different from the
reference on inputs the test did not try?

Reads a JSON file (argv[1]): the module and function that hold the snippet, the test file, and
per mutant the whole mutated file. Runs the test once with a spy on the function to capture the
arguments of its first calls, draws perturbed copies of them (floats and floating-point arrays
moved by random noise; integers, booleans and everything else kept), calls the reference and
every mutant's function on each, and prints one JSON line: per mutant ``differs`` (some output
differs, or only one of the two raised) or ``same``.
"""

from __future__ import annotations

import copy
import importlib
import io
import json
import math
import random
import sys
import types
import unittest
from typing import Any

CALLS = 3


def _perturb(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value + rng.gauss(0.0, 1.0) * max(1.0, abs(value))
    if isinstance(value, list | tuple):
        items = [_perturb(v, rng) for v in value]
        return type(value)(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {k: _perturb(v, rng) for k, v in value.items()}
    module = type(value).__module__
    if module.startswith("torch") and hasattr(value, "is_floating_point"):
        if value.is_floating_point() and value.numel() > 0:
            import torch

            gen = torch.Generator().manual_seed(rng.randrange(2**31))
            noise = torch.randn(value.shape, generator=gen, dtype=value.dtype)
            return value + noise.to(value.device)
        return value.clone()
    if module.startswith("numpy") and getattr(value, "dtype", None) is not None:
        if value.dtype.kind == "f" and value.size > 0:
            import numpy as np

            noise = np.random.default_rng(rng.randrange(2**31)).standard_normal(value.shape)
            return value + noise.astype(value.dtype)
        return value.copy()
    return copy.deepcopy(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, BaseException) or isinstance(b, BaseException):
        return type(a) is type(b)
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    module = type(a).__module__
    if module.startswith("torch") and hasattr(a, "shape"):
        import torch

        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-7, equal_nan=True))
        return bool(torch.equal(a, b))
    if module.startswith("numpy") and hasattr(a, "shape"):
        import numpy as np

        return bool(np.shape(a) == np.shape(b) and np.allclose(a, b, equal_nan=True))
    try:
        return bool(a == b)
    except Exception:
        return repr(a) == repr(b)


def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    except Exception as exc:
        return exc


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    sys.path.insert(0, ".")
    module = importlib.import_module(cfg["module"])
    original = getattr(module, cfg["function"])
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        if len(calls) < CALLS:
            calls.append(copy.deepcopy((args, kwargs)))
        return original(*args, **kwargs)

    setattr(module, cfg["function"], spy)
    tests = importlib.import_module(cfg["test"])
    suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
    unittest.TextTestRunner(stream=io.StringIO()).run(suite)
    setattr(module, cfg["function"], original)
    rng = random.Random(cfg.get("seed", 0))
    inputs = [
        (_perturb(a, rng), _perturb(k, rng)) for a, k in calls for _ in range(cfg.get("draws", 4))
    ]
    reference = [_call(original, a, k) for a, k in inputs]
    verdicts = {}
    for key, text in cfg["mutants"].items():
        mutated = types.ModuleType(cfg["module"])
        mutated.__file__ = module.__file__
        try:
            exec(compile(text, str(module.__file__), "exec"), mutated.__dict__)
            fn = getattr(mutated, cfg["function"])
            outputs = [_call(fn, a, k) for a, k in inputs]
            same = all(_same(r, o) for r, o in zip(reference, outputs, strict=True))
        except Exception:
            same = False
        verdicts[key] = "same" if same else "differs"
    print(json.dumps({"calls": len(calls), "inputs": len(inputs), "verdicts": verdicts}))


if __name__ == "__main__":
    main()
