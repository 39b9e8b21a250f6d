"""Test doubles shipped with rcb-env, for its own tests and for yours: a fake sandbox backend
that needs nothing installed, and a scripted agent. Fakes, not mocks: they behave."""

from rcb_env.testing.fake_sandbox import FakeBackend, FakeSandbox, Injected
from rcb_env.testing.scripted import ScriptedAgent, SleepThenSubmit

__all__ = ["FakeBackend", "FakeSandbox", "Injected", "ScriptedAgent", "SleepThenSubmit"]
