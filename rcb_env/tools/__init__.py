"""Stage: the agent's tools. ``actions`` are the typed actions and their specs, ``toolbox`` runs
them against a sandbox, ``paper`` navigates the paper's text."""
