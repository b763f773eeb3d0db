"""``jobctl pause`` and ``jobctl resume``: stop and restart the claim of a kind or queue of
jobs (the workflow is ``ops/pause``). Registered by ``cli``, in the order ``jobctl --help``
lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from jobctl import errors
from jobctl.cli import context, terminal
from jobctl.cli import options as opt
from jobctl.contract import safe_text
from jobctl.render import output, pause_views, rows, views

if TYPE_CHECKING:
    from jobctl.ops import pause as pause_core

Kind = Annotated[str | None, opt.kind("The kind (the mapped kind column).")]
Queue = Annotated[str | None, opt.queue("The queue (the mapped queue column).")]


def _which(kind: str | None, queue: str | None, command: str) -> tuple[str, str]:
    if kind is not None and queue is not None:
        raise errors.UsageError(f"{command}: give --kind or --queue, one at a time")
    if kind is None and queue is None:
        raise errors.UsageError(f"{command}: give --kind K or --queue Q")
    return ("kind", kind) if kind is not None else ("queue", queue or "")


def pause(
    ctx: typer.Context,
    kind: Kind = None,
    queue: Queue = None,
    reason: Annotated[
        str | None, opt.reason("Why (required to pause): recorded with the pause.")
    ] = None,
    list_pauses: Annotated[
        bool, opt.listing("List the table's pauses: who, why, since when.")
    ] = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Stop claiming the queued jobs of a kind or queue until jobctl resume.

    The claim jobctl gives workers (lease.Worker, schema statements) passes over them; they
    stay queued and wait. Recorded in jobctl's schema with who and why (its owner only), and
    in jobctl events. --list lists the pauses.
    Example: jobctl pause --kind charge_card --reason "payment provider down"
    """
    from jobctl.ops import doctor
    from jobctl.ops import pause as core

    if list_pauses:
        if kind is not None or queue is not None or reason is not None:
            raise errors.UsageError("pause --list takes no --kind, --queue or --reason")
        with context.open_session(ctx) as s:
            found = core.listed(s)
        terminal.emit(
            views.table(found, found, rows.PAUSE_COLUMNS, pause_views.PAUSE_VIEW), out, fmt
        )
        for said in pause_views.claims_lines(found):  # a worker that does not read pauses
            terminal.say(said)
        return
    dimension, value = _which(kind, queue, "pause")
    if reason is None:
        raise errors.UsageError("pause needs --reason TEXT: say why the claim stops (recorded)")
    with context.open_session(ctx) as s:
        done = core.pause(s, dimension, value, reason=reason)
        ignoring = doctor.claims_ignoring_pauses(s)
    _said(done, dimension, value, out, fmt, "paused")
    if ignoring:
        terminal.say(
            f"warning: {ignoring} claim statement(s) on this table in pg_stat_statements do "
            "not read jobctl.pauses: the workers that run them still claim the paused jobs "
            "(jobctl doctor names them; schema statements renders the claim that honours "
            "pauses)"
        )


def resume(
    ctx: typer.Context,
    kind: Kind = None,
    queue: Queue = None,
    reason: opt.Reason = None,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Claim a paused kind or queue again: its queued jobs flow to the workers.

    Recorded in jobctl's schema (its owner only) and in jobctl events, with who and why.
    Example: jobctl resume --kind charge_card --reason "provider back"
    """
    from jobctl.ops import pause as core

    dimension, value = _which(kind, queue, "resume")
    with context.open_session(ctx) as s:
        done = core.resume(s, dimension, value, reason=reason)
    _said(done, dimension, value, out, fmt, "resumed")


def _said(
    done: pause_core.Outcome,
    dimension: str,
    value: str,
    out: output.Output,
    fmt: str | None,
    verb: str,
) -> None:
    """The outcome: its row in a machine format (none: nothing changed), else a line."""
    if not out.tabular:
        found = [done.row | {"changed": done.changed}] if done.row is not None else []
        terminal.emit(views.table(found, found, keys=pause_views.OUTCOME_KEYS), out, fmt)
        return
    shown = f"{dimension} {safe_text.visible(value)}"
    if done.changed and verb == "paused":
        terminal.say(f"{shown} paused: its queued jobs wait, unclaimed, until jobctl resume")
    elif done.changed:
        from jobctl import lease  # (psycopg: not at jobctl's start)

        terminal.say(
            f"{shown} resumed: its queued jobs are claimed again (by lease.Worker within "
            f"{lease.PAUSES_READ_EVERY:g} s)"
        )
    elif done.row is not None:
        row = done.row
        by = safe_text.visible(str(row.get("actor") or row.get("db_role")))
        terminal.say(
            f"{shown} is already paused (since {row['paused_at']:%Y-%m-%d %H:%M:%S %Z}, by "
            f"{by}: {safe_text.visible(str(row.get('reason')))}): nothing changed"
        )
    else:
        terminal.say(f"{shown} is not paused: nothing changed")
