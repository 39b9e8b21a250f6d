"""The bundled tasks: what they must exercise, and that every snippet validates."""

from __future__ import annotations

import pytest

from rcb_env import config
from rcb_env.grading import GradingConfig
from rcb_env.guest.protocol import split_lines
from rcb_env.task import bundled_root, load
from rcb_env.task.annotations import is_code_line
from rcb_env.validation import Status, validate
from tests.conftest import local_grader


def test_bundled_counts_and_coverage() -> None:
    pset = load(bundled_root())
    assert pset.failures == ()
    assert len(pset.papers) >= 3
    assert len(pset.snippets) >= 25
    assert [(p.id, len(p.snippets), p.total_weight) for p in pset.papers] == [
        ("scaled-attention", 12, 38),
        ("adamw-warmup", 10, 32),
        ("rmsnorm-swiglu", 7, 12),
    ]
    assert max(s.depth for s in pset.snippets) >= 2  # three levels of nesting
    assert any(len(p.annotated_files) >= 2 for p in pset.papers)
    assert any("/" in f.path for p in pset.papers for f in p.annotated_files)
    assert any(p.context_files for p in pset.papers)
    attention = pset.paper("scaled-attention")
    assert "data/cases.json" in (attention.root / attention.test_file).read_text()
    requirements = {p.id: p.overlay.requirements for p in pset.papers}
    assert any("torch==2.13.0" in r for r in requirements.values())
    assert any(r == ("numpy",) for r in requirements.values())
    # weight-rule edge cases inside snippet bodies
    bodies = [split_lines(s.reference_body) for s in pset.snippets]
    lines = [line for body in bodies for line in body]
    assert any(line.strip().startswith('"""') and is_code_line(line) for line in lines)
    assert any("  # " in line and is_code_line(line) for line in lines)
    assert any(not line.strip() for line in lines)
    assert any(line.strip().startswith("#") and "paper2code" not in line for line in lines)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.bwrap
def test_every_bundled_snippet_validates(require_bwrap: None) -> None:
    from rcb_env.sandbox import SandboxConfig, SandboxFactory

    factory = SandboxFactory(SandboxConfig(backend="bwrap"))
    try:
        report = validate(
            load(bundled_root()),
            GradingConfig(python=config.task_python()),
            jobs=2,
            executor_for=factory.grading_executor,
        )
    finally:
        factory.close()
    assert {p.grading_path for p in report.papers} == {"warm"}
    statuses = {s.id: s.status for p in report.papers for s in p.snippet_reports}
    assert statuses
    assert set(statuses.values()) == {Status.OK}, {
        k: v for k, v in statuses.items() if v is not Status.OK
    }


def test_the_audit_canary_is_a_real_task_outside_the_default_set() -> None:
    from rcb_env.validation.audit import canary_root

    canary = load(canary_root())
    assert [s.id for s in canary.snippets] == ["leaky-ema/debiased average"]
    assert "leaky-ema" not in {p.id for p in load(bundled_root()).papers}
    grader = local_grader(GradingConfig(python=config.task_python()))
    report = validate(canary, grader.config, executor_for=lambda _: grader.executor)
    assert [s.status for p in report.papers for s in p.snippet_reports] == [Status.OK]
