"""``jobctl doctor``: the lease design's four pre-launch checks against what the application
runs (ops/doctor), read only."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Annotated

import typer

from jobctl import errors
from jobctl.cli import context, terminal
from jobctl.cli import options as opt
from jobctl.render import output

INSTALL = "jobctl doctor needs pglast (PostgreSQL's parser): pip install 'jobctl[doctor]'"


def doctor(
    ctx: typer.Context,
    window: Annotated[
        dt.timedelta,
        opt.Duration("How far back the history is read (leases, reruns).", show_default="7d"),
    ] = dt.timedelta(days=7),
    exit_code: Annotated[bool, opt.exit_code("Exit 4 when any check fails.")] = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """The lease design's pre-launch checklist against the live system, read only: the
    statements that write the jobs table (pg_stat_statements, parsed by PostgreSQL's own
    parser) judged against the design (a sweeper or a claim that takes jobs back by age, an
    unfenced update, a hand requeue, a DELETE of processing rows, a claim without SKIP LOCKED
    or a lease), the stale writes the fence refused, the lease against the heartbeats, reruns
    of auto jobs, the review queue. Each check ok, warn, fail or unknown, with its evidence.
    Needs: pip install 'jobctl[doctor]'.

    Example: jobctl doctor --exit-code
    """
    import importlib.util  # (3 ms of imports: not at jobctl's start)

    if importlib.util.find_spec("pglast") is None:  # an extra: the other commands never need it
        raise errors.UsageError(INSTALL)
    from jobctl.ops import doctor as core
    from jobctl.render import checklist

    with context.open_session(ctx) as s, s.transaction(read_only=True):
        report = core.collect(s, window=window)
    checklist_text = out.tabular and fmt is None
    if not checklist_text and any(c["evidence"] == core.ENABLE for c in report["checks"]):
        terminal.say(f"jobctl: {core.ENABLE}")  # the checklist says it in its first check
    if checklist_text:
        width = terminal.width() if out is output.Output.table else 100
        sys.stdout.write(checklist.text(report, width or 100))
    else:
        terminal.emit(checklist.document(report), out, fmt)
    if exit_code and core.failed(report):
        raise typer.Exit(errors.EXIT_FINDINGS)
