"""``jobctl cancel``: take a running attempt back, fenced on its attempt token as read.

Cooperative cancellation: jobctl cannot stop a worker's process. It clears the lease and the
token, so that the worker's next heartbeat finds no row (``lease.Worker`` raises
``LeaseLost``) and its late completion or fail, fenced on that token, changes nothing.
The options, the filters, the plans and the confirmation are ``fail``'s (``writes.ByHand``,
``writes.by_hand_or_filter``); ``fail --force`` on a live lease is this same write.
"""

from __future__ import annotations

import typer

from jobctl.cli import options as opt
from jobctl.cli.commands import writes
from jobctl.render import output


def cancel(
    ctx: typer.Context,
    asked: writes.Cancel = writes.CANCEL,
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
    writes.by_hand_or_filter(ctx, "cancel", asked, out, fmt)
