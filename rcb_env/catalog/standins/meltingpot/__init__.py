"""rcb-env's stand-in for DeepMind's ``dm-meltingpot``, which cannot be installed offline (its
build downloads assets). It exists only so that ``from meltingpot import substrate, scenario``
succeeds for code that imports it without running a Melting Pot environment; any use beyond the
import raises :class:`StandInError`. It is not Melting Pot and computes nothing."""

from . import scenario, substrate


class StandInError(RuntimeError):
    """Raised on any use of the stand-in beyond importing it."""


__all__ = ["StandInError", "scenario", "substrate"]
