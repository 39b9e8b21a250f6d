"""Adapters for the RL trainers people use: TRL's ``environment_factory``
(:mod:`rcb_env.integrations.trl`), SkyRL-Gym (:mod:`rcb_env.integrations.skyrl`, needs
``skyrl-gym``). Each is a thin layer over one episode (:mod:`rcb_env.integrations.pull`)."""
