"""``jobctl cancel``: take a running attempt back, fenced on its attempt token as read.

Cooperative cancellation: jobctl cannot stop a worker's process. It clears the lease and the
token, so that the worker's next heartbeat finds no row (``lease.Worker`` raises
``LeaseLost``) and its late completion or fail, fenced on that token, changes nothing.
The options, the filters, the plans and the confirmation are ``fail``'s (``writes``);
``fail --force`` on a live lease is this same write.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from jobctl.cli import options as opt
from jobctl.cli import terminal
from jobctl.cli.commands import writes
from jobctl.render import output


def cancel(
    ctx: typer.Context,
    job_ids: opt.JobIdsOrStdin = None,
    plan: opt.ReviewPlan = None,
    reason: opt.RequiredReason = "",
    park: Annotated[
        bool,
        typer.Option(
            "--park",
            help="Put the job in the park status (a human decides) instead of failed.",
        ),
    ] = False,
    expect_token: opt.ExpectToken = None,
    yes: opt.Yes = False,
    slicing: opt.Slicing = opt.ANY_JOB,
    bulk: opt.Bulk = opt.BULK_DEFAULTS,
    save_plan: opt.BulkSavePlan = None,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Take running attempts back: the job failed (or --park), its lease and token cleared.

    A live lease is the point: the worker may be running it. jobctl cannot stop it; the
    worker's next heartbeat finds no row (lease.Worker raises LeaseLost: stop the work) and
    its late completion is refused by the fence. Fenced on the attempt as read: a job that
    finished or changed meanwhile is a conflict (exit 3), nothing written. A filter (--kind,
    --queue, --error, --worker, --older-than, --no-lease) instead of ids lists the running
    jobs it matches: --save-plan FILE saves them, --yes cancels exactly those.
    Example: jobctl cancel 42 --reason "payment provider down" --yes
    """
    which = writes.bulk_filter(slicing, None, bulk)
    if which or not (job_ids or plan):
        writes.ids_or_plan_not_with_a_filter(job_ids, plan, expect_token)
        writes.bulk_write(
            ctx, "cancel", which, reason, dt.timedelta(0), True, yes, save_plan, out, fmt, park=park
        )
        return
    writes.no_save_plan_without_a_filter(save_plan)
    report = writes.by_hand(
        ctx,
        "cancel",
        job_ids,
        plan,
        reason,
        dt.timedelta(0),
        expect_token=expect_token,
        force=True,
        yes=yes,
        park=park,
    )
    terminal.report(report, out, fmt)
