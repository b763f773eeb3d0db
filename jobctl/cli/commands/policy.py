"""The recovery policy's commands: ``policy`` (a job's, or a kind's or queue's: auto, reclaim
may requeue; manual, a human decides) and ``quarantine`` (auto jobs reclaimed again and again
switched to manual). Fenced and audited like every write, on the manual writes' path
(``ops/manual``, ``ops/policy``). Optional commands: registered by ``cli`` from the command
table, imported by no core module.
"""

from __future__ import annotations

from typing import Annotated

import typer

from jobctl.cli import context, parameters, terminal
from jobctl.cli import options as opt
from jobctl.cli.commands import writes
from jobctl.render import output, rows, views, write_lines


def quarantine(
    ctx: typer.Context,
    min_reclaims: Annotated[
        int, typer.Option(min=1, metavar="N", help="Auto jobs reclaimed at least this many times.")
    ] = 3,
    commit: Annotated[bool, opt.commit("Apply, or only list (the default).")] = False,
    limit: Annotated[int, opt.limit("At most this many jobs.")] = 1000,
    reason: opt.Reason = None,
    yes: opt.Yes = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Switch auto jobs that keep getting reclaimed to manual: stop retrying them blindly.

    A job that crashes its worker every time is reclaimed again and again; quarantine makes a
    human decide. Each switch is fenced and audited; undo with jobctl policy ID --auto.
    Example: jobctl quarantine --min-reclaims 3 --commit --reason "crash loop"
    """
    from jobctl.ops import manual

    with context.open_session(ctx) as s:
        if not commit:
            found = [d.seen for d in manual.quarantine_candidates(s, min_reclaims, limit)]
        else:
            report = writes.answered(
                manual.quarantine(s, min_reclaims, limit, reason=reason, ask=not yes)
            )
    if not commit:
        terminal.emit(
            views.table(
                found, found, rows.PREVIEW_COLUMNS, views.PREVIEW_VIEW, rows.READ_BEFORE_KEYS
            ),
            out,
            fmt,
        )
        terminal.say(write_lines.quarantine_dry_run(len(found)))
        return
    terminal.report(report, out, fmt)


def policy(
    ctx: typer.Context,
    job_ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Job ids (or --kind / --queue).",
            metavar="[ID...]",
            show_default=False,
            callback=parameters.not_an_option,
        ),
    ] = None,
    auto: Annotated[
        bool | None,
        typer.Option(
            "--auto/--manual",
            help="The recovery policy to set: one of the two is required (no default).",
            show_default=False,
        ),
    ] = None,
    reason: opt.Reason = None,
    yes: opt.Yes = False,
    kind: Annotated[
        str | None, opt.kind("Set the policy of every job of this kind (the mapped column).")
    ] = None,
    queue: Annotated[str | None, opt.queue("Set the policy of every job of this queue.")] = None,
    remove: Annotated[
        bool, typer.Option("--remove", help="With --kind/--queue: remove its policy.")
    ] = False,
    list_kinds: Annotated[bool, opt.listing("List the policies per kind and queue.")] = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Set jobs' recovery policy (auto: reclaim may requeue; manual: a human decides).

    Fenced and audited like every write. --kind K / --queue Q record a policy for every job
    of that kind or queue (manual wins over the row's; recorded in jobctl's schema and its
    history); --list lists them, --remove removes one.
    Example: jobctl policy 42 --auto --reason "fixed"; jobctl policy --kind charge_card --manual
    """
    from jobctl.ops import policy as core

    request = core.Request(
        tuple(job_ids or ()),
        None if auto is None else "auto" if auto else "manual",
        reason=reason,
        yes=yes,
        kind=kind,
        queue=queue,
        remove=remove,
        listing=list_kinds,
    )
    with context.open_session(ctx) as s:
        done = writes.answered(core.run(s, request))
    match done:
        case core.Listed(rows=found):
            terminal.emit(views.table(found, found, keys=rows.KIND_POLICY_KEYS), out, fmt)
        case core.Removed(dimension=dimension, value=value, gone=gone):
            terminal.say(write_lines.policy_removed(dimension, value, gone))
        case core.Recorded(dimension=dimension, value=value, policy=wanted):
            terminal.say(write_lines.policy_recorded(dimension, value, wanted))
        case _:
            terminal.report(done, out, fmt)
