"""Stage: runs. Many episodes, parallel workers, durable records, resume."""

from rcb_env.runner.eval import BudgetConfig, EvalConfig, new_run_dir, run_episode, run_eval

__all__ = ["BudgetConfig", "EvalConfig", "new_run_dir", "run_episode", "run_eval"]
