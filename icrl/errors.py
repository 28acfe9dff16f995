"""User-facing errors: scripts print the message on one line and exit with code 2."""

import argparse


class UsageError(ValueError):
    """Bad input from the user (unknown name, invalid option, missing file).

    The message is one line that says what was wrong and what to do.
    """


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose bad-flag errors are UsageErrors (one line, exit code 2) like our own checks."""

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")
