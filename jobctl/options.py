"""Options several commands share, defined once (``Annotated`` aliases for typer).

Durations are a parameter type: ``--grace 5m`` arrives as a ``timedelta``, and a bad one is
refused by the parser with one line (exit 2) before the command runs.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import typer

from jobctl import durations, output


def duration(value: str | dt.timedelta) -> dt.timedelta:
    """typer's parser for every DURATION option (defaults arrive already parsed)."""
    if isinstance(value, dt.timedelta):
        return value
    try:
        return durations.parse(value)
    except durations.InvalidDuration as exc:
        raise typer.BadParameter(str(exc)) from None


def Duration(help: str, **kwargs: Any) -> Any:
    """A DURATION option; ``show_default`` gives its default as typed (e.g. "2s")."""
    return typer.Option(parser=duration, metavar="DURATION", help=help, **kwargs)


Out = Annotated[
    output.Output,
    typer.Option(
        "--output", "-o", help="table (rich on a terminal, plain otherwise), json, jsonl, csv, tsv."
    ),
]
Format = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="FORMAT",
        help="Any tabulate table format for -o table: plain, github, psql, ...",
    ),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Confirm without a prompt.")]
Worker = Annotated[str | None, typer.Option(metavar="NAME", help="Only this worker's jobs.")]
Policy = Annotated[str | None, typer.Option(metavar="auto|manual", help="Only this policy.")]
Grace = Annotated[
    dt.timedelta,
    Duration("Only leases expired longer ago than this.", show_default="0s"),
]
Soon = Annotated[dt.timedelta, Duration("Window for 'expiring soon'.", show_default="30s")]
Watch = Annotated[bool, typer.Option("--watch", help="Refresh in place until Ctrl-C.")]
Every = Annotated[dt.timedelta, Duration("Watch refresh.", show_default="2s")]
Count = Annotated[
    int | None,
    typer.Option("--count", min=1, metavar="N", help="Stop watching after N refreshes."),
]
Reason = Annotated[str | None, typer.Option(help="Why: recorded in the history.")]
ExpectToken = Annotated[
    str | None,
    typer.Option(
        help="Act only if the job's attempt token is this UUID (your copy, e.g. from stuck)."
    ),
]
Force = Annotated[bool, typer.Option(help="Act even on a live lease (its worker may run).")]
PrintSql = Annotated[bool, typer.Option("--sql", help="Print the SQL instead.")]
