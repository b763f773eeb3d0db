"""Where and how jobctl connects, from the global options: the DSN, the table, the timeouts
and who acts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import os
import socket

from jobctl import errors

DEFAULT_STATEMENT_TIMEOUT = dt.timedelta(seconds=30)
DEFAULT_LOCK_TIMEOUT = dt.timedelta(seconds=2)


def default_actor() -> str:
    """Who is acting, for the audit trail: user@host."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry, e.g. in a container
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where and how jobctl connects, from the global options."""

    dsn: str | None = None
    table: str = "jobs"
    statement_timeout: dt.timedelta = DEFAULT_STATEMENT_TIMEOUT
    lock_timeout: dt.timedelta = DEFAULT_LOCK_TIMEOUT
    actor: str = dataclasses.field(default_factory=default_actor)
    target: str | None = None  # the config file's name for this database (--target), if any

    def __post_init__(self) -> None:
        # PostgreSQL counts these in whole milliseconds, and 0 is its "no timeout": a bound
        # shorter than 1 ms would be none (the CLI's parser refuses it first, options.py)
        for name in ("statement_timeout", "lock_timeout"):
            if getattr(self, name) < dt.timedelta(milliseconds=1):
                raise errors.UsageError(f"{name} must be 1ms at least (0 means no timeout)")

    def resolved_dsn(self) -> str:
        """--dsn, then JOBCTL_DSN, then DATABASE_URL, then libpq's own PG* variables; a
        config file's target has its own DSN only (``targets``), never another's."""
        if self.target is not None:
            return self.dsn or ""
        return self.dsn or os.environ.get("JOBCTL_DSN") or os.environ.get("DATABASE_URL") or ""
