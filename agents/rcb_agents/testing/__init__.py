"""Test doubles that are real peers: a local HTTP server speaking the model APIs' wire formats."""

from rcb_agents.testing.server import Fault, Reply, ScriptedModelServer

__all__ = ["Fault", "Reply", "ScriptedModelServer"]
