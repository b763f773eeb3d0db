"""``jobctl metrics``: lease health as Prometheus text (the workflow is ``ops/metrics``, the
exposition ``render/openmetrics``). An optional command: registered by ``cli`` from the
command table, imported by no core module.

``--textfile PATH`` writes the exposition the way node_exporter's textfile collector wants a
file replaced: into a temporary file in the same directory (a name the collector skips, not
ending in ``.prom``), flushed to disk, then renamed over PATH in one step, so a scrape reads
the old file or the new one, never half of one; and it is written whatever the exit code
(up 0 when a database failed), so a failure is published instead of the last good figures.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jobctl import db, errors, targets
from jobctl.cli import context, terminal
from jobctl.cli import options as opt

if TYPE_CHECKING:
    from jobctl.ops.fleet import Outcome
    from jobctl.ops.metrics import Measured

Textfile = Annotated[
    Path | None,
    typer.Option(
        "--textfile",
        metavar="PATH",
        dir_okay=False,
        help="Write the exposition to PATH through a temporary file and a rename (node_exporter's "
        "textfile collector), up 0 included, instead of stdout.",
    ),
]


def metrics(
    ctx: typer.Context,
    expiring_within: opt.Soon = None,
    reclaim_window: Annotated[
        dt.timedelta, opt.Duration("Window for recent reclaims.", show_default="5m")
    ] = dt.timedelta(minutes=5),
    max_stuck: Annotated[
        int | None,
        typer.Option(min=0, metavar="N", help="Exit 4 when more jobs than this are stuck."),
    ] = None,
    max_overdue: Annotated[
        dt.timedelta | None, opt.Duration("Exit 4 when a lease expired longer ago.")
    ] = None,
    slicing: opt.Slicing = opt.ANY_JOB,
    label_top: opt.LabelTop = 10,
    textfile: Textfile = None,
) -> None:
    """Lease health in the Prometheus text format, for the node_exporter textfile collector,
    a cron job or a Nagios-style check (--max-stuck, --max-overdue: exit 4 when breached).
    A database down: jobctl_up 0 is still printed, exit 1.

    Example: jobctl metrics --textfile /var/lib/prometheus/node-exporter/jobctl.prom
    """
    from jobctl.ops import metrics as core
    from jobctl.render import openmetrics

    where = context.address(ctx)
    one = targets.single(where)
    what = slicing.slice()
    ask = core.Ask(expiring_within, reclaim_window, what, label_top, max_stuck, max_overdue)
    try:
        measured = core.run(where, context.command_access(ctx), ask, say=terminal.say)
    except errors.JobctlError:  # up 0 still published (exit 1): never the last good figures
        if one is not None:
            terminal.publish(textfile, openmetrics.down(one.target, collected_at=time.time()))
        raise
    terminal.publish(textfile, _exposition(one, measured))
    code = context.exit_code(measured)
    for line in _critical(one is None, measured):
        terminal.say(line)
    breached = any(o.value.breached for o in measured if o.value)
    context.exit_with(context.with_findings(code, breached))


def _exposition(one: db.Settings | None, measured: list[Outcome[Measured]]) -> str:
    """One database's exposition (labelled with its target, if named), or (``one`` None) one
    across targets: every sample labelled with its target, ``jobctl_target_up`` saying which
    answered."""
    from jobctl.render import openmetrics

    if one is not None:
        (value,) = (o.value for o in measured)  # one database: its failure was raised
        assert value is not None
        return openmetrics.exposition(
            value.figures, value.table, target=one.target, collected_at=time.time()
        )
    return openmetrics.exposition_across(
        [(o.target.name, (o.value.table, o.value.figures)) for o in measured if o.value],
        {o.target.name: o.ok for o in measured},
        collected_at=time.time(),
    )


def _critical(several: bool, measured: list[Outcome[Measured]]) -> list[str]:
    """A line per threshold broken (across targets: each naming its target)."""
    return [
        f"jobctl: CRITICAL: target {o.target.name}: {line}"
        if several
        else f"jobctl: CRITICAL: {line}"
        for o in measured
        if o.value
        for line in o.value.breached
    ]
