"""Logging: the one place structlog is set up.

Library modules log through :func:`get_logger`, which hands structured events to the standard
``logging`` module: silent unless the application configures it, as a library should be. The CLI
calls :func:`configure` once to render them on stderr, as console lines or JSON lines.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_ROOT = "rcb_env"
# A library stays silent until the application configures logging: without a handler of its
# own, Python's last-resort handler would print rcb-env's warnings on stderr.
logging.getLogger(_ROOT).addHandler(logging.NullHandler())


def get_logger(name: str, **bound: Any) -> structlog.stdlib.BoundLogger:
    """A structlog logger on top of ``logging.getLogger(name)``; ``bound`` values go on every
    event (e.g. ``task_id``, ``episode_id``)."""
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(name),
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[structlog.contextvars.merge_contextvars, structlog.stdlib.render_to_log_kwargs],
    )
    return logger.bind(**bound) if bound else logger


def configure(*, json: bool = False, level: str = "warning") -> None:
    """Render rcb-env's events on stderr (idempotent)."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.ExtraAdder(),
                structlog.stdlib.add_log_level,
                structlog.processors.TimeStamper(fmt="iso"),
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger(_ROOT)
    root.handlers = [handler]
    root.setLevel(level.upper())
    root.propagate = False
