"""The argument parser every script uses: bad flags are one-line UsageErrors (exit 2), and
--help shows each option's default once."""

import argparse

from ..errors import UsageError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's help ends with its default, shown once: ``(default: X)`` is added unless
    the text already says what the default is (or that the flag is required); a required
    option says ``(required)``; None shows as ``none``."""

    def _get_help_string(self, action):
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

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")
