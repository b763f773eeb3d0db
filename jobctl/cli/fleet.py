"""The commands across several targets (``--all-targets``, or ``--target`` more than once):
each target read at once on its own connection (``fleet.across``), every row tagged with its
target, a failing target one line on stderr while the others' output stays whole (exit 1).

Writes run target after target: ``reclaim`` (its dry run, its commit after one confirmation
listing each target's counts, a plan across targets, the service serving every target from
one process). Commands by id refuse several targets (``targets.one_database``).
"""

from __future__ import annotations

import collections
import datetime as dt
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import typer

from jobctl import errors
from jobctl.cli import terminal
from jobctl.ops import fleet
from jobctl.render import output, rows, views
from jobctl.targets import Target

if TYPE_CHECKING:
    from pathlib import Path

    from jobctl.db.session import Session
    from jobctl.ops.reclaim import Request
    from jobctl.ops.replica import Standing
    from jobctl.ops.review import ReviewFilter
    from jobctl.ops.triage import ExpiredFilter

T = TypeVar("T")


def _read(
    ctx: typer.Context,
    targets: Sequence[Target],
    read: fleet.Read[T],
    kept: fleet.KeptSessions | None = None,
) -> list[fleet.Outcome[T]]:
    """``read`` on every target at once (``fleet.read``), as this command accesses them."""
    from jobctl.cli import context

    return fleet.read(targets, context.command_access(ctx), read, kept)


def _said(outcomes: Sequence[fleet.Outcome[Any]], *, refresh: bool = False) -> int:
    """What each target said, then each failure, one line each, in the targets' order; the
    exit code the failures make (0 when none). ``refresh``: one refresh of a watch's."""
    for o in outcomes:
        for line in o.said:
            terminal.say(f"jobctl: target {o.target.name}: {line.removeprefix('jobctl: ')}")
    for o in outcomes:
        if o.error is not None:
            terminal.say(f"jobctl: error: {fleet.failure_line(o)}")
    failed = [o for o in outcomes if not o.ok]
    if failed and len(failed) < len(outcomes):
        some = f"jobctl: {len(failed)} of {len(outcomes)} targets failed"
        terminal.say(
            f"{some} this refresh: its line holds the others' rows only"
            if refresh
            else f"{some}: the output above is the others' only"
        )
    return fleet.exit_code(outcomes)


def _watch(
    ctx: typer.Context,
    targets: Sequence[Target],
    read: fleet.Read[T],
    doc_of: Callable[[list[fleet.Outcome[T]]], output.Document],
    *,
    every: dt.timedelta,
    count: int | None,
    out: output.Output,
    fmt: str | None,
) -> None:
    """``--watch`` across targets: every refresh reads every target at once, each on the
    connection it kept (a target that fails a refresh gets a new one at the next, so it is
    back as soon as it answers). On a terminal what the targets said is above the table;
    else one JSON line per refresh, and the lines on stderr as one run's. Exit 1 when the
    last refresh had a target failing, as one run's."""
    from jobctl.ops import watch

    in_place = terminal.refreshed_in_place(out, fmt)
    last: list[fleet.Outcome[T]] = []
    kept = fleet.KeptSessions()

    def refresh() -> tuple[dt.datetime, output.Document]:
        outcomes = last[:] = _read(ctx, targets, read, kept)
        at, doc = dt.datetime.now().astimezone(), doc_of(outcomes)
        if not in_place:
            _said(outcomes, refresh=True)
            return at, doc
        said = [(o.target.name, line.removeprefix("jobctl: ")) for o in outcomes for line in o.said]
        failed = [
            (o.target.name, f"error: {fleet.failure_message(o)}") for o in outcomes if not o.ok
        ]
        return at, views.with_target_lines(doc, said + failed)

    try:
        with terminal.live(out, fmt, every.total_seconds()) as show:
            watch.repeat(refresh, show, every=every, count=count)
    finally:
        kept.close()
    _exit(fleet.exit_code(last))


def _with_findings(code: int, found: bool) -> int:
    """The exit code with --exit-code's findings (4) in it: a failed target (1) outranks them."""
    return errors.worst_exit_code([code, errors.EXIT_FINDINGS]) if found else code


def _exit(code: int) -> None:
    if code:
        raise typer.Exit(code)


# ---------------------------------------------------------------- reads
def stuck(
    ctx: typer.Context,
    targets: Sequence[Target],
    where: ExpiredFilter,
    *,
    limit: int,
    expiring_within: dt.timedelta | None,
    trust_replica: bool,
    exit_code: bool,
    watch_every: dt.timedelta | None,
    count: int | None,
    out: output.Output,
    fmt: str | None,
) -> None:
    """``stuck`` on every target: one table, the target first (``--watch``: refreshed)."""
    from jobctl.ops import replica
    from jobctl.ops import stuck as stuck_read

    at_risk = expiring_within is not None
    ask = stuck_read.Ask(where, limit, expiring_within, trust_replica)

    def read(s: Session, st: Standing, say: fleet.Say) -> list[rows.Row]:
        with s.transaction(read_only=True):
            found: list[Any] = list(stuck_read.rows(s, st, ask))
            line = stuck_read.held_back(s, st, ask)
            if line:
                say(line)
        marked = replica.mark(output.Document(found, []), st).payload  # a standby's rows say so
        return list(fleet.tagged(s.settings.target or "", marked))

    columns = rows.AT_RISK_COLUMNS if at_risk else rows.STUCK_COLUMNS

    def doc_of(outcomes: list[fleet.Outcome[list[rows.Row]]]) -> output.Document:
        found = [row for o in outcomes for row in o.value or []]
        return views.across_targets(views.stuck(found, columns, at_risk=at_risk))

    if watch_every is not None:
        _watch(ctx, targets, read, doc_of, every=watch_every, count=count, out=out, fmt=fmt)
        return
    outcomes = _read(ctx, targets, read)
    found = [row for o in outcomes for row in o.value or []]
    terminal.emit(doc_of(outcomes), out, fmt)
    code = _said(outcomes)
    if found and sys.stdout.isatty() and out.tabular:
        holding = [o.target.name for o in outcomes if o.value]
        again = " ".join(f"--target {name}" for name in holding)
        terminal.say(
            f"{len(found)} job(s) on {len(holding)} target(s); preview the reclaim with: "
            f"jobctl {again} reclaim --dry-run"
        )
    _exit(_with_findings(code, exit_code and bool(found)))


def summary(
    ctx: typer.Context,
    targets: Sequence[Target],
    *,
    expiring_within: dt.timedelta,
    exact: bool,
    watch_every: dt.timedelta | None,
    count: int | None,
    out: output.Output,
    fmt: str | None,
) -> None:
    """``summary`` on every target: a row each (statuses by the part they play), and the total
    (``--watch``: refreshed)."""
    from jobctl.ops import summary as core
    from jobctl.ops import triage

    def read(s: Session, _st: Standing, _say: fleet.Say) -> rows.Row:
        with s.transaction(read_only=True):
            result = triage.summary(s, expiring_within, exact=exact)
        return core.by_role(result, s.table.mapping)

    def doc_of(outcomes: list[fleet.Outcome[rows.Row]]) -> output.Document:
        return views.summary_targets(
            core.rows([(o.target.name, o.value) for o in outcomes if o.value])
        )

    if watch_every is not None:
        _watch(ctx, targets, read, doc_of, every=watch_every, count=count, out=out, fmt=fmt)
        return
    outcomes = _read(ctx, targets, read)
    terminal.emit(doc_of(outcomes), out, fmt)
    _exit(_said(outcomes))


def review(
    ctx: typer.Context,
    targets: Sequence[Target],
    where: ReviewFilter,
    *,
    limit: int,
    exit_code: bool,
    out: output.Output,
    fmt: str | None,
) -> None:
    """``review`` on every target: one table, the target first."""
    from jobctl.ops import review as core

    def read(s: Session, _st: Standing, _say: fleet.Say) -> list[rows.Row]:
        with s.transaction(read_only=True):
            return list(fleet.tagged(s.settings.target or "", core.awaiting(s, where, limit)))

    outcomes = _read(ctx, targets, read)
    found = [row for o in outcomes for row in o.value or []]
    doc = views.table(found, found, rows.REVIEW_COLUMNS, views.REVIEW_VIEW)
    terminal.emit(views.across_targets(doc), out, fmt)
    code = _said(outcomes)
    _exit(_with_findings(code, exit_code and bool(found)))


def metrics(
    ctx: typer.Context,
    targets: Sequence[Target],
    *,
    expiring_within: dt.timedelta,
    reclaim_window: dt.timedelta,
    max_stuck: int | None,
    max_overdue: dt.timedelta | None,
    textfile: Path | None = None,
) -> None:
    """``metrics`` on every target: one exposition, each sample labelled with its target, and
    ``jobctl_target_up`` saying which targets answered (printed, or ``textfile`` replaced,
    whatever the exit code: a target down is published as its up 0)."""
    import time

    from jobctl.ops import metrics as core
    from jobctl.render import openmetrics

    def read(s: Session, st: Standing, _say: fleet.Say) -> tuple[str, rows.Row]:
        with s.transaction(read_only=True):
            figures = core.on_server(
                s, st, expiring_within=expiring_within, reclaim_window=reclaim_window
            )
        return s.table.qualified, figures

    outcomes = _read(ctx, targets, read)
    terminal.publish(
        textfile,
        openmetrics.exposition_across(
            [(o.target.name, o.value) for o in outcomes if o.value],
            {o.target.name: o.ok for o in outcomes},
            collected_at=time.time(),
        ),
    )
    code = _said(outcomes)
    breached = False
    for o in outcomes:
        figures = o.value[1] if o.value else None
        for line in (
            core.breaches(figures, max_stuck=max_stuck, max_overdue=max_overdue) if figures else []
        ):
            terminal.say(f"jobctl: CRITICAL: target {o.target.name}: {line}")
            breached = True
    _exit(_with_findings(code, breached))


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
    code = _said(outcomes)
    if request.save_plan is not None:
        again = " ".join(f"--target {name}" for name, _ in answered)
        terminal.say(
            f"plan of {len(answered)} target(s) saved to {request.save_plan}: apply it with "
            f"jobctl {again} reclaim --commit --plan {request.save_plan}"
        )
    _exit(code)


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
    from jobctl.cli import context
    from jobctl.ops import reclaim, reclaim_targets

    run = reclaim_targets.start(
        targets,
        request,
        context.command_access(ctx),
        confirm=terminal.confirm,
        say=terminal.say,
        unreachable=_said,
    )
    if not run.targets:
        _exit(fleet.exit_code(run.unreachable))
    batches = reclaim.Run(run.batches, run.total)
    kept, counts = terminal.drain(batches, out, fmt, columns=["target", *rows.RECLAIM_KEYS])
    if out.tabular:
        shown = sum(counts.values())
        doc = views.some_rows(kept, shown, rows.RECLAIM_COLUMNS, views.RECLAIM_VIEW)
        terminal.emit(views.across_targets(doc), out, fmt)
    _tallies(run.done, run.parks, committed=True)
    _exit(errors.worst_exit_code([fleet.exit_code(run.unreachable), _said(run.outcomes)]))


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
    _exit(errors.EXIT_ERROR if failed or len(usable) < len(targets) else 0)
