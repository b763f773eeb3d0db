"""Errors with exit codes. Each carries its default message as its docstring."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_CONFLICT = 3
EXIT_FINDINGS = 4


class JobctlError(Exception):
    """jobctl failed."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        self.message = message or (self.__doc__ or "").strip()


class UsageError(JobctlError):
    """Invalid input."""

    exit_code = EXIT_USAGE


class Refused(JobctlError):
    """Refused: nothing was changed."""

    exit_code = EXIT_USAGE


class NothingDone(Refused):
    """Refused before anything changed: ``reason``, then "; nothing done". Code that shows
    the reason elsewhere (why a table is not served yet, say) takes ``reason`` alone."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason}; nothing done")
        self.reason = reason


class Cancelled(Refused):
    """cancelled; nothing changed"""

    # the person said no at a prompt (exit 2) or pressed Ctrl-C there (exit 130): not an
    # error, so the line says what happened without "error:"

    def __init__(self, exit_code: int = EXIT_USAGE) -> None:
        super().__init__()
        self.exit_code = exit_code


class ConnectError(JobctlError):
    """Cannot connect to the database."""


class DatabaseError(JobctlError):
    """The database reported an error."""


class TableNotFound(JobctlError):
    """The jobs table does not exist."""


class SchemaMissing(JobctlError):
    """The jobs table lacks the lease columns: run 'jobctl schema apply'."""


class LockTimeout(JobctlError):
    """A row or table lock was not granted within lock_timeout."""


class StatementTimeout(JobctlError):
    """The statement ran longer than statement_timeout."""


def worst_exit_code(codes: list[int]) -> int:
    """The worst of several exit codes: 1 (error) > 3 (conflict) > 2 (refused) > 0."""
    rank = {EXIT_OK: 0, EXIT_USAGE: 1, EXIT_CONFLICT: 2, EXIT_ERROR: 3, EXIT_FINDINGS: 1}
    return max(codes, key=lambda code: rank.get(code, 3), default=EXIT_OK)
