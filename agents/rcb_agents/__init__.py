"""Baseline agents for rcb-env, behind one small protocol."""

from rcb_agents.base import Agent, load_agent_class
from rcb_agents.baselines import NullAgent, OracleAgent

__all__ = ["Agent", "NullAgent", "OracleAgent", "load_agent_class"]
