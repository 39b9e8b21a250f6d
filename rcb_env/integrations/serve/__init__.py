"""Episodes served over the network in OpenEnv's session protocol (``rcb-env serve``): a
trainer on another machine holds the GPUs, this server holds the sandboxes.

- :mod:`.protocol`: the wire contract (frames, error codes, the served observation and state,
  ``/schema`` generated from the typed actions);
- :mod:`.sessions`: the episodes of the server (admission, caps, idle reaper, drain, records);
- :mod:`.app`: the ASGI app (routes, the token, size limits) and :func:`~.app.serve`;
- :mod:`.pool`: the trainer's side of several servers (spreads episodes, a lost server's
  episodes unscored).
"""
