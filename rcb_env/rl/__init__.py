"""RL fine-tuning loops: async rollouts with token-level data, groups with failure semantics,
and export. See :mod:`rcb_env.rl.rollout` and :mod:`rcb_env.rl.trajectory`."""

from rcb_env.rl import shared
from rcb_env.rl.policy import ContextLengthError, Policy, PolicyOutput
from rcb_env.rl.rollout import (
    AsyncRcbEnv,
    Group,
    RolloutConfig,
    openai_tools,
    rollout,
    rollout_group,
)
from rcb_env.rl.trajectory import FlatTokens, ModelTurn, Trajectory, TrajectoryStep

__all__ = [
    "AsyncRcbEnv",
    "ContextLengthError",
    "FlatTokens",
    "Group",
    "ModelTurn",
    "Policy",
    "PolicyOutput",
    "RolloutConfig",
    "Trajectory",
    "TrajectoryStep",
    "openai_tools",
    "rollout",
    "rollout_group",
    "shared",
]
