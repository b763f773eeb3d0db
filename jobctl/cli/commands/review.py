"""``jobctl review``: the jobs waiting for a human, and the plan that decides them in bulk.
Read-only; the writes it leads to are ``writes``'. Registered by ``cli`` from the command
table.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Annotated

import typer

from jobctl.cli import context, terminal
from jobctl.cli import options as opt
from jobctl.render import output, views


# ---------------------------------------------------------------- review
def review(
    ctx: typer.Context,
    policy: opt.Policy = None,
    worker: Annotated[str | None, opt.worker("Only jobs this worker's lease left.")] = None,
    since: Annotated[
        dt.timedelta | None, opt.since("Only jobs reclaimed within this.", duration=True)
    ] = None,
    older_than: Annotated[
        dt.timedelta | None, opt.older_than("Only jobs waiting for longer than this.")
    ] = None,
    limit: opt.RowLimit = 1000,
    save_plan: Annotated[
        Path | None, opt.save_plan("Write the reviewed rows to FILE, for requeue/fail --plan.")
    ] = None,
    exit_code: Annotated[bool, opt.exit_code("Exit 4 when any job awaits review.")] = False,
    slicing: opt.Slicing = opt.ANY_JOB,
    full: opt.Full = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Jobs waiting for a human: reclaim failed or parked them (manual policy, or attempts
    exhausted) and nobody has acted on them since. Longest waiting first.

    Decide in bulk, fenced on what you reviewed: jobctl review --save-plan p.json, then
    jobctl requeue --plan p.json (or fail --plan p.json --reason ...). A worker's name, kind
    or last_error longer than 4096 characters is cut, with a note; --full shows every byte.
    Example: jobctl review --policy manual --since 2h
    """
    from jobctl.ops import fleet
    from jobctl.ops import review as core

    which = core.ReviewFilter(
        policy=context.policy_option(policy),
        worker=worker,
        since=since,
        older_than=older_than,
        what=slicing.slice(),
        full=full,
    )
    where = context.address(ctx)
    several = fleet.several(where)
    outcomes = core.run(
        where,
        context.command_access(ctx),
        which,
        limit=limit,
        plan=save_plan,
        say=terminal.say,
    )
    found = [row for o in outcomes if o.value for row in o.value.rows]
    optional = [k for o in outcomes if o.value for k in o.value.optional]
    terminal.emit(views.review(found, several=several, optional=optional), out, fmt)
    code = context.exit_code(outcomes)
    again = context.invocation(ctx).again()  # the global options the printed commands repeat
    if save_plan is not None:
        terminal.say(
            f"plan of {len(found)} job(s) saved to {save_plan}: apply it with "
            f"jobctl {again}requeue --plan {save_plan} "
            f"(or jobctl {again}fail --plan {save_plan} --reason ...)"
        )
    elif found and sys.stdout.isatty() and out is output.Output.table and not several:
        terminal.say(
            f"{len(found)} job(s) await review: jobctl {again}requeue ID / jobctl {again}fail ID"
        )
    context.exit_with(context.with_findings(code, exit_code and bool(found)))
