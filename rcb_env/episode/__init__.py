"""Stage: episodes. One snippet, one Gymnasium environment."""

from rcb_env.episode.env import EnvConfig, RcbEnv, make_env
from rcb_env.episode.registry import env_id, register_bundled
from rcb_env.episode.wrappers import Budgets

__all__ = ["Budgets", "EnvConfig", "RcbEnv", "env_id", "make_env", "register_bundled"]
