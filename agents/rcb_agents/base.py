"""The agent protocol lives in the environment (:mod:`rcb_env.agent`); re-exported here."""

from rcb_env.agent import Agent, MeteredAgent, load_agent_class

__all__ = ["Agent", "MeteredAgent", "load_agent_class"]
