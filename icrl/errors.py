"""User-facing errors: scripts print the message on one line and exit with code 2."""


class UsageError(ValueError):
    """Bad input from the user (unknown name, invalid option, missing file).

    The message is one line that says what was wrong and what to do.
    """
