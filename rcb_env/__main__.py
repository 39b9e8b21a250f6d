"""``python -m rcb_env`` is the ``rcb-env`` command."""

from rcb_env.cli import main

main()
