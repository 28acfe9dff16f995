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


class ServiceFailure(UsageError):
    """A model service that failed where a run could have started (no answer, a request refused
    for good): ``line`` says what happened and ``todo`` what to do. A run says between them
    whether steps were saved (``said``), which only it knows; anywhere else the message is the
    two alone."""

    def __init__(self, line: str, todo: str = "rerun the same command to resume"):
        self.line, self.todo = line, todo
        super().__init__(f"{line}; {todo}")

    def said(self, steps_done: int) -> str:
        """The line as a run says it: ``...; no step ran: ...`` or ``...; finished steps are saved: ...``."""
        return f"{self.line}; {'finished steps are saved' if steps_done else 'no step ran'}: {self.todo}"
