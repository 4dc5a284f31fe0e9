"""One error type carries the exit code, so the CLI never shows a traceback for expected failures.

Exit codes are a contract (docs/contracts.md §3): 0 clean, 1 findings, 2 bad input, 3 internal error.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class OomDoctorError(Exception):
    """An expected failure with a one-line message for the user and an exit code."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


class InputError(OomDoctorError):
    """Unreadable or malformed input (a file, a bundle, a size, a manifest). Exit 2, one line naming it."""

    exit_code = EXIT_USAGE


class UsageError(OomDoctorError):
    """The command line itself is wrong."""

    exit_code = EXIT_USAGE
