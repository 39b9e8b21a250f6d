"""Which tests a unittest file defines, found statically (the tested code cannot change it).
Defined in the task layer (:mod:`rcb_env.task.discovery`), where the task sources use it."""

from __future__ import annotations

from rcb_env.task.discovery import expected_tests

__all__ = ["expected_tests"]
