"""The verifiers taskset package for rcb-env (``vf-eval rcb_verifiers ...``).

verifiers finds a taskset, and its environment, by a top-level module name and takes the
classes this module exports in ``__all__``; they live in :mod:`rcb_env.integrations.verifiers`.
"""

from rcb_env.integrations.verifiers import RcbTaskset, RcbVerifiersEnv

__all__ = ["RcbTaskset", "RcbVerifiersEnv"]
