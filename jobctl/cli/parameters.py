"""What options and arguments call as typer parses them (``cli/options`` declares them): the
parsers of their types (a DURATION, with the floors some refuse below; a UUID), shell
completion from the database (job ids, workers), and ids that look like an option refused.

Durations are a parameter type: ``--grace 5m`` arrives as a ``timedelta``, and a bad one is
refused by the parser with one line (exit 2) before the command runs.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable

import typer

from jobctl import durations, targets


def duration(value: str | dt.timedelta) -> dt.timedelta:
    """typer's parser for every DURATION option (defaults arrive already parsed)."""
    if isinstance(value, dt.timedelta):
        return value
    try:
        return durations.parse(value)
    except durations.InvalidDuration as exc:
        raise typer.BadParameter(str(exc)) from None


def at_least(floor: tuple[dt.timedelta, str]) -> Callable[[str | dt.timedelta], dt.timedelta]:
    """A DURATION parser that refuses a value shorter than ``floor``'s (with its reason)."""
    least, why = floor

    def bounded(value: str | dt.timedelta) -> dt.timedelta:
        parsed = duration(value)
        if parsed < least:
            raise typer.BadParameter(
                f"{value!r} is shorter than {durations.show(least)}, the least accepted: {why}"
            )
        return parsed

    return bounded


# the floors (docs/commands.md): PostgreSQL counts its timeouts in whole milliseconds and
# takes 0 for "no timeout", so a shorter one would be no bound at all; a service or a watch
# repeating faster than ten times a second would only load the database (a reclaimer must
# still run several times within a lease as short as 1s: the chaos suite's)
TIMEOUT_FLOOR = (dt.timedelta(milliseconds=1), "0 ms is PostgreSQL's 'no timeout'")
SERVICE_FLOOR = (dt.timedelta(milliseconds=100), "a faster reclaimer only loads the database")
WATCH_FLOOR = (dt.timedelta(milliseconds=100), "a faster refresh only loads the database")


def complete_policies(incomplete: str) -> list[str]:
    return [p for p in ("auto", "manual") if p.startswith(incomplete)]


def attempt_token(value: str | uuid.UUID) -> uuid.UUID:
    """typer's parser for --expect-token."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a UUID") from None


def complete_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Job ids from the database, for shell completion: nothing (and no error) without one."""
    return from_database(ctx, "complete_ids", incomplete)


def from_database(ctx: typer.Context, statement: str, incomplete: str) -> list[str]:
    """The first column of a completion statement's rows (job ids, workers): nothing (and no
    error) without a database, or when it has not answered within what is left of the
    completion's one deadline (``completion.ask``: a read not done by then is left behind,
    and the process does not wait for it)."""
    from jobctl.cli import completion

    return completion.ask(lambda left: _from_database(ctx, statement, incomplete, left))


def _from_database(ctx: typer.Context, statement: str, incomplete: str, left: float) -> list[str]:
    try:
        import os

        from jobctl import db
        from jobctl.db import session

        root = ctx.find_root().params
        names = root.get("target") or []
        if not names and not root.get("dsn") and not root.get("all_targets"):
            names = targets.from_environment()
        if len(names) == 1:  # the ids of that target's database
            target = targets.load().select(names)[0]
            if target.problem:  # no DSN of its own: nothing, never another database's
                return []
            settings = target.settings
        elif names or root.get("all_targets"):  # ids are per database: none across targets
            return []
        else:
            settings = db.Settings(dsn=root.get("dsn"), table=root.get("table") or "jobs")
        if not settings.resolved_dsn() and not os.environ.get("PGDATABASE"):
            return []
        import dataclasses
        import datetime as dt

        # bounded on the server too: the statement (and a lock) give up within the deadline
        wait = dt.timedelta(seconds=max(left, 0.001))
        settings = dataclasses.replace(settings, statement_timeout=wait, lock_timeout=wait)
        with session.open(settings) as s, s.transaction(read_only=True):
            return [next(iter(r.values())) for r in s.rows(statement, {"prefix": incomplete})]
    except Exception:
        return []


def not_an_option(
    ctx: typer.Context, param: typer.CallbackParam, value: str | list[str] | None
) -> str | list[str] | None:
    """Ids where an option's name was meant (``policy 9 manual``, ``requeue 7 force``) are
    refused by the parser (exit 2) with the option they look like: as ids they would only be
    "not found" (or worse, the command would run without the option). An id spelled exactly
    as one of the command's options is still reachable: no table's ids are plain words."""
    if ctx.resilient_parsing or value is None:
        return value
    names = {
        name[2:]: name
        for option in ctx.command.params
        for name in getattr(option, "opts", []) + getattr(option, "secondary_opts", [])
        if name.startswith("--")
    }
    for given in [value] if isinstance(value, str) else value:
        meant = names.get(str(given).lower())
        if meant is not None:
            raise typer.BadParameter(f"{given!r} is not a job id: did you mean {meant}?")
    return value
