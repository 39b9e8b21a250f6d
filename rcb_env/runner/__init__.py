"""Stage: runs. Many episodes, parallel workers, durable records, resume."""

from rcb_env.episode.driver import BudgetConfig
from rcb_env.runner.episode import EvalConfig, run_episode
from rcb_env.runner.eval import new_run_dir, run_eval

__all__ = ["BudgetConfig", "EvalConfig", "new_run_dir", "run_episode", "run_eval"]
