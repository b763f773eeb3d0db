"""The command across several targets (``--all-targets``, or ``--target`` more than once)
that still has a path of its own there (``reclaim``; ``stuck``, ``summary``, ``review`` and
``metrics`` run one workflow whatever the number of targets: ``ops.stuck``, ``ops.summary``,
``ops.review``, ``ops.metrics``):
each target read at once on its own connection (``fleet.across``), every row tagged with its
target, a failing target one line on stderr while the others' output stays whole (exit 1).

Writes run target after target: ``reclaim`` (its dry run, its commit after one confirmation
listing each target's counts, a plan across targets, the service serving every target from
one process). Commands by id refuse several targets (``targets.one_database``).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import typer

from jobctl import errors
from jobctl.cli import context, terminal
from jobctl.ops import fleet
from jobctl.render import output, rows, views
from jobctl.targets import Target

if TYPE_CHECKING:
    from jobctl.db.session import Session
    from jobctl.ops.reclaim import Request
    from jobctl.ops.replica import Standing

T = TypeVar("T")


def _read(
    ctx: typer.Context,
    targets: Sequence[Target],
    read: fleet.Read[T],
    kept: fleet.KeptSessions | None = None,
) -> list[fleet.Outcome[T]]:
    """``read`` on every target at once (``fleet.read``), as this command accesses them."""
    return fleet.read(targets, context.command_access(ctx), read, kept)


# ---------------------------------------------------------------- reclaim
def reclaim(
    ctx: typer.Context,
    targets: Sequence[Target],
    request: Request,
    *,
    trust_replica: bool,
    out: output.Output,
    fmt: str | None,
) -> None:
    """``reclaim`` across targets: the dry run at once on every target; a commit (or a plan
    across targets) target after target, after one confirmation; the service for them all."""
    if request.expired.ids:
        raise errors.UsageError("--id: ids are per database: give one --target with it")
    if request.every is not None:
        _serve(targets, request, out, fmt)
    elif not request.commit:
        _dry_run(ctx, targets, request, trust_replica, out, fmt)
    else:
        _commit(ctx, targets, request, out, fmt)


def _dry_run(
    ctx: typer.Context,
    targets: Sequence[Target],
    request: Request,
    trust_replica: bool,
    out: output.Output,
    fmt: str | None,
) -> None:
    from jobctl.ops import plans, reclaim_targets, replica
    from jobctl.ops import reclaim as core

    parks: dict[str, str | None] = {}

    def read(s: Session, st: Standing, say: fleet.Say) -> tuple[dict[str, Any], list[Any]]:
        found = core.dry_run(
            s, replica.widen(request.expired, st, trust=trust_replica), request.limit
        )
        note = replica.dry_run_note(st)
        if note:
            say(note)
        parks[s.settings.target or ""] = s.table.mapping.named_park
        return s.origin(), found

    outcomes = _read(ctx, targets, read)
    answered = [(o.target.name, o.value) for o in outcomes if o.value is not None]
    if request.save_plan is not None:
        plans.write_parts(request.save_plan, reclaim_targets.PLANS_FORMAT, [v for _, v in answered])
    everything = [row for name, (_, found) in answered for row in fleet.tagged(name, found)]
    if out.tabular:
        shown = [
            row
            for name, (_, found) in answered
            for row in fleet.tagged(name, terminal.table_rows(found, 0, 0))
        ]
        doc = views.some_rows(shown, len(everything), rows.RECLAIM_COLUMNS, views.RECLAIM_VIEW)
    else:
        doc = views.table(everything, everything, rows.RECLAIM_COLUMNS)
    terminal.emit(views.across_targets(doc), out, fmt)
    counts = {name: core.tally(found) for name, (_, found) in answered}
    _tallies(counts, parks, committed=False)
    code = context.said(outcomes)
    if request.save_plan is not None:
        again = " ".join(f"--target {name}" for name, _ in answered)
        terminal.say(
            f"plan of {len(answered)} target(s) saved to {request.save_plan}: apply it with "
            f"jobctl {again} reclaim --commit --plan {request.save_plan}"
        )
    context.exit_with(code)


def _tallies(
    counts: dict[str, collections.Counter[str]],
    parks: dict[str, str | None],
    *,
    committed: bool,
) -> None:
    """Each target's line (its park status named, as one reclaim's line does), and the total."""
    from jobctl.ops import reclaim as core

    for name, tally in counts.items():
        line = core.summary_line(tally, committed, park_status=parks.get(name))
        terminal.say(f"target {name}: {line}")
    if len(counts) > 1:
        total: collections.Counter[str] = sum(counts.values(), collections.Counter())
        some_parked = any(parks.get(name) for name in counts)
        line = core.summary_line(total, committed, some_parked=some_parked)
        terminal.say(f"all {len(counts)} targets: {line}")
    total = sum(counts.values(), collections.Counter())
    names = list(counts)
    step = core.next_step(
        total,
        committed,
        park_status=parks.get(names[0]) if len(names) == 1 else None,
        some_parked=len(names) > 1 and any(parks.get(name) for name in names),
    )
    if step is not None:
        terminal.say(f"{step} (with the same target options)")


def _commit(
    ctx: typer.Context,
    targets: Sequence[Target],
    request: Request,
    out: output.Output,
    fmt: str | None,
) -> None:
    """Commit target after target (``reclaim_targets``); one question first."""
    from jobctl.ops import reclaim, reclaim_targets

    run = reclaim_targets.start(
        targets,
        request,
        context.command_access(ctx),
        confirm=terminal.confirm,
        say=terminal.say,
        unreachable=context.said,
    )
    if not run.targets:
        context.exit_with(fleet.exit_code(run.unreachable))
    batches = reclaim.Run(run.batches, run.total)
    kept, counts = terminal.drain(batches, out, fmt, columns=["target", *rows.RECLAIM_KEYS])
    if out.tabular:
        shown = sum(counts.values())
        doc = views.some_rows(kept, shown, rows.RECLAIM_COLUMNS, views.RECLAIM_VIEW)
        terminal.emit(views.across_targets(doc), out, fmt)
    _tallies(run.done, run.parks, committed=True)
    context.exit_with(
        errors.worst_exit_code([fleet.exit_code(run.unreachable), context.said(run.outcomes)])
    )


def _serve(
    targets: Sequence[Target], request: Request, out: output.Output, fmt: str | None
) -> None:
    """The reclaimer service for every target from one process: a thread, a connection and
    a backoff each; one target down never stops the others."""
    from jobctl.ops import service

    assert request.every is not None
    usable = [t for t in targets if not t.problem]
    for t in targets:
        if t.problem:  # never served from another DSN (JOBCTL_DSN) in its stead
            terminal.say(f"jobctl: error: target {t.name}: {t.problem}: not served")
    if not usable:
        raise errors.UsageError("no target can be served")
    failed = service.run_many(
        [(t.name, t.settings) for t in usable],
        request.expired,
        batch_size=request.batch_size,
        every=request.every,
        on_batch=lambda name, applied: terminal.emit_reclaimed(
            cast(list[rows.ReclaimRow], list(fleet.tagged(name, applied))),
            out,
            fmt,
            across_targets=True,
        ),
        log=terminal.say,
    )
    context.exit_with(errors.EXIT_ERROR if failed or len(usable) < len(targets) else 0)
