"""``jobctl summary``: counts by status, processing split live / expiring soon / expired, and
the workers (the workflow is ``ops/summary``). An optional command: registered by ``cli``
from the command table, imported by no core module.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from jobctl.cli import context, terminal
from jobctl.cli import options as opt
from jobctl.render import output, views


def summary(
    ctx: typer.Context,
    expiring_within: opt.Soon = None,
    exact: Annotated[
        bool, typer.Option("--exact", help="Count finished jobs even on a large table.")
    ] = False,
    watch: opt.Watch = False,
    every: opt.Every = dt.timedelta(seconds=2),
    count: opt.Count = None,
    slicing: opt.Slicing = opt.ANY_JOB,
    by: opt.SummaryBy = None,
    full: opt.Full = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Counts by status; processing split live / expiring soon / expired; workers.

    A deploy that killed a worker shows as one burst of expiries under its name (reclaim
    --refund-attempt gives those attempts back); a dying worker shows as a growing heartbeat
    lag. On tables of a million rows or more, done and
    failed are estimated from statistics (marked) unless --exact. A worker's name (or --by's
    group) longer than 4096 characters is cut, with a note; --full shows every byte.
    Example: jobctl summary --expiring-within 1m --watch
    """
    from jobctl.ops import fleet, standby
    from jobctl.ops import summary as core

    where = context.address(ctx)
    several = fleet.several(where)
    ask = core.Ask(expiring_within, exact, slicing.slice(), by, full)

    def doc_of(outcomes: list[fleet.Outcome[core.Counted]]) -> output.Document:
        counted = [(o.target.name, o.value.result) for o in outcomes if o.value]
        if several:
            return views.summary_targets(core.rows(counted))
        ((_, result),) = counted
        if by is not None:
            return views.summary_by(result)
        return views.summary(result, every_section=out in (output.Output.csv, output.Output.tsv))

    outcomes = core.run(
        where,
        context.command_access(ctx),
        ask,
        say=terminal.say,
        watching=context.watching(ctx, watch, every, count, doc_of, out, fmt),
    )
    if watch:
        context.exit_with(fleet.exit_code(outcomes))
        return
    terminal.emit(standby.mark(doc_of(outcomes), outcomes[0].standing), out, fmt)
    if not several:  # one database: its lines under its table
        (counted,) = (o.value for o in outcomes)
        assert counted is not None
        if by is None:
            no_lease = counted.result["processing"]["no_lease"]
            again = context.invocation(ctx).again()  # repeated by the commands it names
            context.say_if(views.no_lease_line(no_lease, again=again))
        context.say_if(counted.silent)  # the reclaimer's heartbeat (jobctl.reclaimer_passes)
    context.exit_with(context.exit_code(outcomes))
