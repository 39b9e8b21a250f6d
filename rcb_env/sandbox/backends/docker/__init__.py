"""The Docker backend: :mod:`.backend` (the :class:`~rcb_env.sandbox.backend.Backend`),
:mod:`.engine` (the engine client and its host), :mod:`.pool` (containers kept started) and
:mod:`.images` (the per-paper images)."""
