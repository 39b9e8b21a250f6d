"""Does a test reach the candidate's code? A static check for task validation, defined in the
task layer (:mod:`rcb_env.task.reach`), where the task sources use it; re-exported here."""

from __future__ import annotations

from rcb_env.task.reach import Reach, ReachKind, reach

__all__ = ["Reach", "ReachKind", "reach"]
