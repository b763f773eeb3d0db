"""The core's read commands: ``stuck``, ``show``, ``history``, ``explain`` (the workflows are
``ops/stuck`` and ``ops/triage``). Registered by ``cli`` from the command table.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from jobctl import durations, errors
from jobctl.cli import context, terminal
from jobctl.cli import options as opt
from jobctl.cli.commands import monitoring as cli_monitoring
from jobctl.render import output, reclaim_lines, rows, streamed, tables, views

if TYPE_CHECKING:
    from jobctl.ops import fleet
    from jobctl.ops import stuck as stuck_core


def stuck(
    ctx: typer.Context,
    worker: opt.Worker = None,
    policy: opt.Policy = None,
    limit: opt.RowLimit = 1000,
    grace: opt.Grace = dt.timedelta(0),
    expiring_within: Annotated[
        dt.timedelta | None, opt.expiring_within("Add live leases that expire within this.")
    ] = None,
    expiring: Annotated[
        bool,
        typer.Option(
            "--expiring",
            help="Add live leases in the last third of their lease (as summary and top "
            "count expiring soon).",
        ),
    ] = False,
    exit_code: Annotated[bool, opt.exit_code("Exit 4 when any are found.")] = False,
    ready_after: Annotated[
        dt.timedelta,
        opt.Duration(
            "With nothing stuck, say so when ready jobs wait longer than this.",
            show_default="5m",
        ),
    ] = dt.timedelta(minutes=5),
    watch: opt.Watch = False,
    every: opt.Every = dt.timedelta(seconds=2),
    count: opt.Count = None,
    trust_replica: opt.TrustReplica = False,
    slicing: opt.Slicing = opt.ANY_JOB,
    notify: cli_monitoring.Asked = cli_monitoring.NO_NOTIFY,
    full: opt.Full = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Processing jobs whose lease expired (stuck, not merely slow), oldest expiry first.

    Each row says what reclaim would do to it (requeue or fail) and, when another session
    holds it locked, who. --expiring adds the live leases in the last third of their lease
    (--expiring-within: those that run out within a window), with each worker's heartbeat
    lag. A worker's name, kind or queue longer than 4096 characters is cut, with a note
    (--worker still matches the whole name); --full shows every byte.
    Example: jobctl stuck --expiring-within 30s --watch
    """
    from jobctl.ops import fleet
    from jobctl.ops import stuck as core

    if expiring and expiring_within is not None:
        raise errors.UsageError("--expiring and --expiring-within: give one")
    if (expiring or expiring_within is not None) and grace:
        raise errors.UsageError("--grace and --expiring-within look at opposite sides of now()")
    if exit_code and watch:  # a watch refreshes (--count or not): no one answer to exit with
        raise errors.UsageError(
            "--exit-code answers once: drop --watch (a check in a loop runs stuck --exit-code)"
        )
    which = context.expired(slicing, worker=worker, policy=policy, grace=grace, full=full)
    where = context.address(ctx)
    made = cli_monitoring.for_stuck_watch(where, watch, notify)
    ask = core.Ask(which, limit, expiring_within, trust_replica, by_lease=expiring)
    several = fleet.several(where)
    again = context.invocation(ctx).again(targets=not several)  # repeated by printed commands
    shown = _StuckShown(several, ask.at_risk, out, fmt, again)
    try:
        outcomes = core.run(
            where,
            context.command_access(ctx),
            ask,
            say=terminal.say,
            show=shown.stream,
            ready_after=ready_after,
            watching=context.watching(ctx, watch, every, count, shown.told_doc, out, fmt),
            seen=lambda found: cli_monitoring.refreshed(made.watch if made else None, found),
            paused=made.watch.pauses_seen if made else None,
        )
    finally:
        if made:
            made.sender.close()
    if watch:  # it ended with Ctrl-C or its --count
        context.exit_with(fleet.exit_code(outcomes))
        return
    _stuck_said(outcomes, exit_code, ready_after, out, fmt, shown)


class _StuckShown:
    """``stuck``'s rows as its output shows them, on one database or across targets, and
    what it says under them."""

    def __init__(
        self, several: bool, at_risk: bool, out: output.Output, fmt: str | None, again: str
    ) -> None:
        self.several, self.again = several, again  # again: the global options typed
        self.at_risk, self.out, self.fmt = at_risk, out, fmt
        self.columns = rows.AT_RISK_COLUMNS if at_risk else rows.STUCK_COLUMNS
        self.keys = rows.AT_RISK_KEYS if at_risk else rows.STUCK_KEYS
        self.collapsed = streamed.Collapsed()  # jobs with no lease the terminal left out

    def stream(self, found: stuck_core.Stream) -> None:
        """One database's rows, streamed where the format allows (on a terminal too: laid
        out by the first rows, many jobs with no lease below leases counted, not listed,
        unless -o wide; a piped table needs every row for its widths), a standby's marked."""
        from jobctl.ops import standby

        if self.out.tabular and self.fmt is None and terminal.screen(sys.stdout):
            shown = rows.with_optional(self.columns, found.optional)  # the first screen at once
            listed = found.rows
            if self.out is output.Output.table:
                listed = streamed.beside_leases(found.rows, self.collapsed)
            doc = streamed.stuck(listed, shown, at_risk=self.at_risk)
        elif self.out.tabular:
            doc = views.stuck(list(found.rows), self.columns, at_risk=self.at_risk)
        else:  # every key JSON carries, the same header with no row (rows.*_KEYS)
            shown = rows.with_optional(self.columns, found.optional)
            keys = rows.with_optional(self.keys, found.optional)
            doc = views.table(found.rows, found.rows, shown, keys=keys)
        terminal.emit(standby.mark(doc, found.standing), self.out, self.fmt)

    def doc(self, outcomes: list[fleet.Outcome[stuck_core.Found]]) -> output.Document:
        """The rows kept (across targets; a watch's refresh), one table."""
        found = [row for o in outcomes if o.value for row in o.value.rows]
        doc = views.stuck(found, self.columns, at_risk=self.at_risk)
        return views.across_targets(doc) if self.several else doc

    def told_doc(self, outcomes: list[fleet.Outcome[stuck_core.Found]]) -> output.Document:
        """``doc``, each of several targets' lines under its rows added to what it said
        (printed with its name: ``context.exit_code``, a watch's ``target_lines``)."""
        for o in outcomes:
            if o.value is not None:
                o.said += self.under(o.value)
        return self.doc(outcomes)

    def under(self, found: stuck_core.Found) -> list[str]:
        """What ``stuck`` says under one database's rows: the leases a standby's lag held
        back, the jobs with no lease (how many the list holds), the kinds and queues paused,
        the ids two rows hold."""
        from jobctl.ops import repeated_ids, standby
        from jobctl.render import pause_views

        collapsed = self.collapsed.count
        lines = [
            standby.held_back(found.held_back, found.standing),
            views.no_lease_line(
                found.no_lease,
                shown=found.no_lease_listed - collapsed,
                collapsed=bool(collapsed),
                again=self.again,
            ),
            *pause_views.lines(found.paused),
            *(repeated_ids.line(str(i), row) for i, row in found.left_out),
        ]
        return [line for line in lines if line]


def _stuck_said(
    outcomes: list[fleet.Outcome[stuck_core.Found]],
    exit_code: bool,
    ready_after: dt.timedelta,
    out: output.Output,
    fmt: str | None,
    shown: _StuckShown,
) -> None:
    """After ``stuck`` read once: the targets' table, what they said, the hints (repeating
    the global options typed), the exit."""
    if shown.several:
        terminal.emit(shown.told_doc(outcomes), out, fmt)
    else:
        for o in outcomes:
            for line in shown.under(o.value) if o.value else []:
                terminal.say(line)
    code = context.exit_code(outcomes)
    found = sum(o.value.count for o in outcomes if o.value)
    for o in outcomes:
        if o.value and o.value.waiting is not None:
            after = durations.show(ready_after, decimal_seconds=True)
            terminal.say(views.ready_waiting_line(o.value.waiting, after))
    # every job the filter matched, when a --limit showed fewer: said under any output
    total = sum(o.value.total or o.value.count for o in outcomes if o.value)
    cut = total if total > found else None
    # the hint counts what reclaim acts on: expired leases, not the jobs with no lease
    # beside them, nor the live ones --expiring lists
    expired = sum(o.value.expired_listed for o in outcomes if o.value)
    if expired and sys.stdout.isatty() and out.tabular:
        holding = [o.target.name for o in outcomes if o.value and o.value.expired_listed]
        all_expired = total - sum(o.value.no_lease for o in outcomes if o.value)
        terminal.say(
            reclaim_lines.reclaim_hint(
                expired,
                holding if shown.several else None,
                all_expired if cut else None,
                shown.again,
            )
        )
    elif cut:
        terminal.say(f"showing {found} of {cut} job(s) (--limit)")
    if any(o.value and o.value.left_out for o in outcomes):  # ids two rows hold: partial
        code = errors.worst_exit_code([code, errors.EXIT_ERROR])
    context.exit_with(context.with_findings(code, exit_code and bool(found)))


def show(
    ctx: typer.Context,
    job_id: opt.JobId,
    full: opt.Full = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """One job: its row, its lease state (live, expired, none) and its latest events.

    A value longer than 4096 characters is cut, with a note; --full shows every byte.
    Example: jobctl show 42 -o json. See also: history (every attempt and event), explain
    (the same as sentences).
    """
    from jobctl.ops import triage

    with context.open_session(ctx) as s, s.transaction(read_only=True):
        job = triage.show(s, job_id, full=full)
        renamed = triage.renamed(s.table.mapping)
    if out in (output.Output.csv, output.Output.tsv):  # one table: the job as one row
        doc = tables.show_table(job)
    else:
        doc = views.show(job, job_id, renamed)
    terminal.emit(context.marked(ctx, doc), out, fmt)


def history(
    ctx: typer.Context,
    job_id: opt.JobId,
    full: opt.Full = False,
    events: Annotated[
        bool,
        typer.Option(
            "--events",
            help="The events, not the attempts: -o csv/tsv's one table (a row each, with "
            "the job's columns); on a terminal, the job and its events.",
        ),
    ] = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """A job's attempts (heartbeat history) and events (reclaim history), oldest first.
    -o csv/tsv: one table, a row per attempt (--events: per event), with the job's columns.

    Example: jobctl history 42 -o csv --events. See also: show (the row now), explain (the
    same records as sentences).
    """
    from jobctl.ops import triage

    if events and out in (output.Output.json, output.Output.jsonl):
        raise errors.UsageError(f"--events chooses a table; -o {out.value} carries both")
    with context.open_session(ctx) as s, s.transaction(read_only=True):
        result = triage.history(s, job_id, full=full)
    if out in (output.Output.csv, output.Output.tsv):
        doc = tables.history_table(result, events=events)
    else:
        doc = views.history(result, job_id, events_only=events)
    terminal.emit(context.marked(ctx, doc), out, fmt)


def explain(
    ctx: typer.Context,
    job_id: opt.JobId,
    full: opt.Full = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """A job's story in plain sentences: claims, heartbeats against the lease, reclaims, and
    who requeued or failed it and why. JSON gives the same facts as fields.

    Example: jobctl explain 42. See also: show (the row now), history (the records as data).
    """
    from jobctl.ops import triage
    from jobctl.render import story

    with context.open_session(ctx) as s, s.transaction(read_only=True):
        mapping = s.table.mapping
        result = story.explain(
            triage.history(s, job_id, full=full),
            parked=mapping.parked,
            failed=mapping.status("failed"),
            processing=mapping.status("processing"),
            mapped=mapping.mapped_optional,
            again=context.invocation(ctx).again(),
            unlimited=mapping.unlimited_max_attempts,
        )
    if out.tabular and fmt is None:
        width = terminal.width() if out is output.Output.table else None
        print("\n".join(output.prose(line, width) for line in result["story"]))
        return
    terminal.emit(context.marked(ctx, views.explain(result)), out, fmt)
