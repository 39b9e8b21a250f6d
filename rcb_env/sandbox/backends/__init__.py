"""The built-in sandbox backends, one room each: :mod:`.bwrap` (the default), :mod:`.docker` and
:mod:`.local`. They are named in :mod:`rcb_env.sandbox.registry` and imported on first use; a
backend from another distribution comes in the same way, through the ``rcb_env.backends``
entry-point group."""
