"""What every command shares: the global options' state (``--debug``, the ``--dsn`` as
typed), the command's session and the server it found (primary or standby), and the small
helpers the commands of ``cli``, ``cli_review`` and ``cli_writes`` use (one database or
several, ``--policy``, ``--watch``, the replica mark on JSON).

State lives here, not in ``cli``, so that the command modules need not import ``cli`` (the
entry point, which imports them). Read it as ``context.standing`` (rebound per command),
never ``from jobctl.cli.context import standing``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import typer

from jobctl import db, errors
from jobctl.cli import fleet as cli_fleet
from jobctl.cli import terminal
from jobctl.render import output

if TYPE_CHECKING:
    from jobctl.db.session import Session
    from jobctl.ops.replica import Standing
    from jobctl.targets import Target

debug = False
raw_dsn: str | None = None  # as typed, to redact it from any message
standing: Standing | None = None  # the server of the command's session: primary or standby


def remember(*, debug_on: bool, dsn: str | None) -> None:
    """The global options the error path needs (``cli._fail``) and the password warning."""
    global debug, raw_dsn
    debug, raw_dsn = debug_on, dsn


@contextlib.contextmanager
def open_session(ctx: typer.Context) -> Iterator[Session]:
    """The command's session (connection, settings, resolved jobs table). On a standby a
    write is refused before anything is asked, and a read says so on stderr (replica). A table
    jobctl does not serve (yet) is said to be so, with the next step (``unserved.explained``)."""
    from jobctl.db import session
    from jobctl.ops import replica
    from jobctl.schema import unserved

    global standing
    from jobctl.targets import one_database

    settings = one_database(ctx.find_root().obj, ctx.command_path)
    with session.open(settings) as s, unserved.explained(s):
        standing = replica.check(s.conn, ctx.info_name or "", ctx.params, say=terminal.say)
        yield s


def across(ctx: typer.Context) -> Sequence[Target] | None:
    """The targets of a command run across several (``--all-targets``, or more than one
    ``--target``), else None: one database."""
    fleet = cli_fleet.several(ctx)
    return None if fleet is None else fleet.targets


def policy_option(value: str | None) -> str | None:
    """``--policy`` checked: auto, manual, or not given."""
    if value is not None and value not in ("auto", "manual"):
        raise errors.UsageError(f"--policy {value!r} must be auto or manual")
    return value


def marked(doc: output.Document) -> output.Document:
    """On a standby, JSON carries a ``replica`` field (docs/replicas.md)."""
    from jobctl.ops import replica

    return replica.mark(doc, standing)


def say_if(line: str | None) -> None:
    if line:
        terminal.say(line)


def run_watch(
    s: Session,
    produce: Callable[[], output.Document],
    every: dt.timedelta,
    count: int | None,
    out: output.Output,
    fmt: str | None,
) -> None:
    """--watch: refresh in place on a terminal, else one JSON line per refresh."""
    from jobctl.ops import watch

    warn_password_on_command_line()
    with terminal.live(out, fmt, every.total_seconds()) as show:
        watch.watch(s, produce, show, every=every, count=count)


def warn_password_on_command_line() -> None:
    """A command that runs for long (the service, a watch) keeps its command line, the
    password in --dsn with it, visible to every user of the machine (ps) all that time."""
    if db.holds_password(raw_dsn):
        terminal.say(
            "jobctl: warning: the password in --dsn stays visible in the process list (ps) "
            "while this runs: set JOBCTL_DSN, or keep it in a password file (PGPASSFILE)"
        )
