"""schema apply's options that name the table's own parts: its columns, statuses and park
status, a time's unit and zone, the priority order, the max_attempts value that means no
limit. Each merges into the mapping recorded for the table (``TableMapping.onto``)."""

from __future__ import annotations

from typing import Annotated

import typer

from jobctl.cli.options import status

ColumnMappings = Annotated[
    list[str] | None,
    typer.Option(
        "--column",
        metavar="DESIGN=ACTUAL",
        help="The table's own name for one of the lease design's columns, e.g. "
        "status=state (repeatable). Recorded in the database for every command. "
        "kind=COL and queue=COL (optional) name what the job is: reads show them and "
        "--kind/--queue narrow by them; priority=COL (optional): the claim takes the "
        "lowest first (see --priority-order).",
    ),
]
StatusMappings = Annotated[
    list[str] | None,
    status(
        "DESIGN=ACTUAL",
        "The table's own value for queued, processing, done or failed, e.g. "
        "processing=running (repeatable); cancelled=VALUE (optional): what jobctl cancel "
        "writes instead of failed.",
    ),
]
ParkStatus = Annotated[
    str | None,
    typer.Option(
        metavar="VALUE",
        help="Where reclaim sends what it would fail (manual policy, out of attempts), "
        "e.g. manual_review. Default: failed.",
    ),
]
ColumnUnits = Annotated[
    list[str] | None,
    typer.Option(
        "--column-unit",
        metavar="DESIGN=UNIT",
        help="The unit of a time the table keeps as a number since the epoch, s or ms, "
        "e.g. updated_at=ms (see docs/your-table.md, Supported column types).",
    ),
]
PriorityOrder = Annotated[
    str | None,
    typer.Option(
        "--priority-order",
        metavar="asc|desc",
        help="Which priority the claim takes first: asc, the lowest value (Delayed::Job, "
        "Oban, River; the default), or desc, the highest. Needs --column priority=COL.",
    ),
]
UnlimitedMaxAttempts = Annotated[
    str | None,
    typer.Option(
        "--unlimited-max-attempts",
        metavar="VALUE",
        help="The max_attempts value that means no limit, e.g. 0 (OCA queue_job's: retry for "
        "ever); '' for none (the default: every value is a limit).",
    ),
]
TimeZone = Annotated[
    str | None,
    typer.Option(
        "--time-zone",
        metavar="ZONE",
        help="The zone the table's times of type timestamp (without time zone) are kept in: "
        "UTC unless named (Europe/Brussels, a PostgreSQL zone name). jobctl and the "
        "statements it renders read and write them in it, whatever a session's TimeZone.",
    ),
]
