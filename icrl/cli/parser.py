"""The argument parser every script uses: bad flags are one-line UsageErrors (exit 2), and
--help shows each option's default once; ``flag_words`` spells a flag's value as the words that
set it (a sweep's runs)."""

import argparse
import sys
from typing import Any, Callable, NoReturn, Optional, Sequence

from ..errors import UsageError
from ..infra import plugins


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default, shown once: ``(default: X)`` is added unless
    the text already says what the default is (or that the flag is required); a required
    option says ``(required)``; None shows as ``none``."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        lowered = text.lower()
        if action.required:
            return text if "required" in lowered else f"{text} (required)"
        if "default" in lowered or "required" in lowered:
            return text
        return f"{text} (default: {'none' if action.default is None else '%(default)s'})"


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose bad-flag errors are UsageErrors (one line, exit code 2) like our own checks,
    and whose --help shows every option's default once (:class:`HelpFormatter`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def load_plugins(argv: Sequence[str]) -> None:
    """The plugins of a script that reads runs or tokenizers (the script loaded them before it
    imported its command line; ``main(argv)`` alone: here). With plugins, the run configuration is
    built now, as run_experiment.py builds it: a parameter of theirs that takes a flag of icrl's,
    or that another part declares, is refused in one line at start."""
    plugins.load(argv)
    if plugins.loaded():
        from .. import config  # noqa: F401 - its import checks every declared parameter's name


def parse_flags(build: Callable[[], argparse.ArgumentParser], argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """``argv`` (``sys.argv[1:]`` when None) parsed by the parser ``build()`` makes, once the
    plugins it names are loaded (``load_plugins``): the flags of a script that reads runs or
    tokenizers, ``--plugin`` left out (loaded already). Bad flags: a one-line UsageError."""
    argv = sys.argv[1:] if argv is None else list(argv)
    load_plugins(argv)
    args = build().parse_args(argv)
    del args.plugin
    return args


def add_plugin_flag(parser: argparse._ActionsContainer) -> None:
    """``--plugin FILE_OR_MODULE`` (repeatable): read before the parser is built
    (``icrl.infra.plugins``); the parser only shows it in --help and accepts it."""
    parser.add_argument(plugins.FLAG, action="append", default=None, metavar="FILE_OR_MODULE", help=plugins.HELP)


def flag_action(parser: argparse.ArgumentParser, name: str) -> argparse.Action:
    """The action of flag ``--name`` in ``parser`` (an unknown flag is a one-line UsageError)."""
    option = f"--{name}"
    for action in parser._actions:
        if option in action.option_strings:
            return action
    raise UsageError(f"unknown flag --{name} in the sweep; see run_experiment.py --help for the flags")


def flag_words(parser: argparse.ArgumentParser, name: str, value: object) -> list[str]:
    """run_experiment.py words that set flag ``name`` to ``value`` (booleans: --x / --no-x)."""
    action = flag_action(parser, name)
    boolean = isinstance(action, argparse.BooleanOptionalAction)
    if boolean or isinstance(action, argparse._StoreTrueAction):
        if isinstance(value, str):
            text = value.strip().lower()
            if text not in ("true", "false", "1", "0", "yes", "no"):
                raise UsageError(f"--{name} is a yes/no flag: give true or false, not {value!r}")
            value = text in ("true", "1", "yes")
        if not isinstance(value, bool):
            raise UsageError(f"--{name} is a yes/no flag: give true or false, not {value!r}")
        if value:
            return [f"--{name}"]
        if boolean:
            return [f"--no-{name}"]
        return []  # a plain switch that is off: leave it out
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise UsageError(f"--{name} takes one value, not {value!r}")
    return [f"--{name}", str(value)]
