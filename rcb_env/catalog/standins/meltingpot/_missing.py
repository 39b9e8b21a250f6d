"""What every attribute of the stand-in's modules resolves to: a callable that refuses."""

from typing import Any, NoReturn


def refuse(module: str, name: str) -> Any:
    def missing(*_args: Any, **_kwargs: Any) -> NoReturn:
        from . import StandInError

        raise StandInError(
            f"{module}.{name}: rcb-env's meltingpot stand-in only satisfies imports; install the "
            "real dm-meltingpot to run Melting Pot environments"
        )

    missing.__name__ = name
    return missing
