"""The command line of run_experiment.py: argparse lives here and nowhere below it.

``parse_args(argv)`` turns the flags into a frozen ``icrl.config.RunConfig`` (the only
place that does); ``validate(config)`` rejects bad combinations (pure)."""

from .run import DEMO_ARGS, build_parser, parse_args
from .validate import validate, validate_backend_flags, validate_device, validate_model_path

__all__ = ["DEMO_ARGS", "build_parser", "parse_args", "validate", "validate_backend_flags", "validate_device",
           "validate_model_path"]
