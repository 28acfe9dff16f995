"""User-facing errors: scripts print the message on one line and exit with code 2."""


class UsageError(ValueError):
    """Bad input from the user (unknown name, invalid option, missing file).

    The message is one line that says what was wrong and what to do.
    """


class CannotWrite(OSError):
    """A file could not be written (``filename``: the path the user knows, never a temporary
    file's); the tools say it in one line (``icrl.infra.diskfull.os_error_line``)."""


class DamagedRecords(UsageError):
    """A run's records contradict each other or their config.json, or are not of their types
    (one-line message naming the file, the line and the field)."""
