"""The commands that look back across jobs: ``events`` (the history's record, streamed) and
``report`` (an incident on one page, for the postmortem). Read-only. Optional commands:
registered by ``cli`` from the command table, imported by no core module.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from jobctl.cli import context, terminal
from jobctl.cli import options as opt
from jobctl.render import output, rows, tables, views

EVENTS_TABLE_ROWS = 1000  # a table on a terminal: the first ones (every row with -o jsonl)


def events(
    ctx: typer.Context,
    since: opt.Since = None,
    until: opt.Until = None,
    event: Annotated[
        list[str] | None,
        typer.Option(
            "--event",
            metavar="EVENT",
            help="Only this event, e.g. reclaimed (repeatable, or a comma list).",
        ),
    ] = None,
    actor: Annotated[str | None, opt.actor("Only this actor's.")] = None,
    worker: Annotated[str | None, opt.worker("Only events of this worker's attempts.")] = None,
    job_ids: opt.OnlyIds = None,
    oldest_first: Annotated[
        bool, typer.Option("--oldest-first/--newest-first", help="Order by the event time.")
    ] = False,
    limit: opt.Limit = None,
    full: opt.Full = False,
    slicing: opt.Slicing = opt.ANY_JOB,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """The history across jobs: every transition but claims and completions, and every
    jobctl write, newest first, streamed (-o jsonl/csv for millions of rows).

    --since/--until take a duration (2h: that long ago) or a timestamp.
    Example: jobctl events --since 2h --event reclaimed --event requeued
    """
    from jobctl.ops import events as core

    with context.open_session(ctx) as s:
        window = core.Window(
            since=core.bound(since) if since else None,
            until=core.bound(until) if until else None,
            events=core.known_events(event) if event else None,
            actor=actor,
            worker=worker,
            ids=s.job_ids(job_ids) if job_ids else None,
            what=slicing.slice(),  # the jobs as they are now
        )
        window.what.check(s.table.mapping)
        with s.transaction(read_only=True):
            if out.tabular:  # a table needs every row for its widths: the first ones
                cap = EVENTS_TABLE_ROWS if limit is None else limit
                found = list(
                    core.stream(s, window, oldest_first=oldest_first, limit=cap + 1, full=full)
                )
                more = len(found) > cap
                found = found[:cap]
                shown = rows.with_optional(rows.JOB_EVENT_COLUMNS, found)
                doc = views.table(found, found, shown, views.JOB_EVENT_VIEW)
            else:
                streamed = core.stream(s, window, oldest_first=oldest_first, limit=limit, full=full)
                mapped = s.table.mapping.mapped_optional
                doc = views.table(
                    streamed,
                    streamed,
                    rows.with_optional(rows.JOB_EVENT_COLUMNS, mapped),
                    keys=rows.with_optional(rows.JOB_EVENT_KEYS, mapped),
                )
                more = False
            terminal.emit(doc, out, fmt)
    if more:
        terminal.say(
            f"the first {len(found)} events shown: every one with -o jsonl, -o csv, or --limit N"
        )


def report(
    ctx: typer.Context,
    since: Annotated[str, opt.since("From this long ago (2h) or this time.")] = "2h",
    until: opt.Until = None,
    slicing: opt.Slicing = opt.ANY_JOB,
    out: opt.Out = output.Output.table,
) -> None:
    """An incident on one page of Markdown, for the postmortem: what expired (when, by
    worker), what reclaim did, what people did (who, what, why), what still waits for
    review, and the queue latency where the history can tell it. -o json gives the data;
    -o csv/tsv the same as one table, a row per row of each part (its section first).

    Example: jobctl report --since 2h > incident.md
    """
    from jobctl.ops import events
    from jobctl.ops import report as core
    from jobctl.render import markdown

    window = events.Window(
        since=events.bound(since),
        until=events.bound(until) if until else None,
        what=slicing.slice(),
    )
    with context.open_session(ctx) as s, s.transaction(read_only=True):
        result = core.collect(s, window)
        target = s.settings.target
    if out in (output.Output.json, output.Output.jsonl):
        terminal.emit(output.Document(result, []), out, None)
    elif out.tabular:
        sys.stdout.write(markdown.report(result, target=target))
    else:  # csv, tsv: one table, a section column (tables.report_table)
        terminal.emit(tables.report_table(result), out, None)
