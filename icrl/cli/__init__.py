"""The command line of run_experiment.py: argparse lives here and nowhere below it.

``parse_args(argv)`` turns the flags into a frozen ``icrl.config.RunConfig`` (the only
place that does); ``icrl.cli.validate.validate(config)`` rejects bad combinations (pure).

Importing the package imports none of its modules: each script imports only its own command
line (``from icrl.cli.figures import main``), so the figures' script does not build the run
configuration, and a script says bad input before the libraries its work needs load. The names
below come from ``icrl.cli.run`` and ``icrl.cli.validate`` when first read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .run import DEMO_ARGS, build_parser, parse_args
    from .validate import validate_backend_flags, validate_device, validate_model_path

__all__ = ["DEMO_ARGS", "build_parser", "parse_args", "validate_backend_flags", "validate_device",
           "validate_model_path"]


def __getattr__(name: str) -> Any:
    if name in ("DEMO_ARGS", "build_parser", "parse_args"):
        from . import run

        return getattr(run, name)
    if name in __all__:
        from . import validate as checks

        return getattr(checks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
