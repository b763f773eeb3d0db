"""``jobctl reclaim``'s workflow (``run``), the one the command calls whatever the number of
targets: a generator of typed steps (``steps``) the command consumes, data it words
(``render.reclaim_lines``) and prints. One database is a fleet of one that keeps its own
path: its dry run streamed, or its commit after one question, batch after batch
(``one_database.start``), its failure raised. Across targets the dry run reads every target
at once, and the commit runs target after target after one question (``across_targets``).
With ``--every``: the reclaimer service (``serve``), for one database or for every target
from one process (``service``).

The batches are counted here as they pass (``tally.Tally``), and handed over in a ``Run``,
which the command drains (printing them); what it did (or, a dry run, would do) comes last
as ``Reclaimed``: its tally (the counts, and the rows a table shows), the counts the lines
under it say, the targets' outcomes. Example::

    with contextlib.closing(run(settings, Access("reclaim"), Request())) as steps:
        for step in steps:
            match step:
                case Asked():      # the question: closing the steps instead writes nothing
                    ask(reclaim_lines.asked(step.question))
                case Run():        # the batches: drain them
                    for batch in step.batches: print_batch(batch)
                case Reclaimed():
                    print(reclaim_lines.said(step.summary))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, cast

from jobctl import db, errors
from jobctl.contract.shapes import ReclaimRow
from jobctl.ops import fleet, repeated_ids
from jobctl.ops.reclaim import across_targets, one_database, row_errors
from jobctl.ops.reclaim.steps import Reclaimed, Run, Said, Step
from jobctl.ops.reclaim.tally import Tally
from jobctl.render.reclaim_lines import AcrossTargets, OneDatabase
from jobctl.render.rows import RECLAIM_OPTIONAL_KEYS
from jobctl.targets import Fleet

if TYPE_CHECKING:
    from jobctl.db.session import Session
    from jobctl.ops.notify import Watch
    from jobctl.ops.reclaim.request import Request
    from jobctl.ops.sessions import Access
    from jobctl.targets import Target

Served = Callable[[list[ReclaimRow]], None]  # a service's batch, its applied rows (tagged)


def run(where: fleet.Where, access: Access, request: Request) -> Generator[Step, None, None]:
    """The reclaim ``request`` asks for, on one database or on the targets of a fleet, as the
    steps it takes: its dry run, or its commit (its question first, unless ``request.yes``:
    it goes on once the consumer asks for the next step; across targets the targets the
    preview could not read yielded before it). The batches of a dry run streamed or of a
    commit are a ``Run`` to drain, counted as they pass; ``Reclaimed`` comes last. The
    service (``request.every``) is ``serve``."""
    match where:
        case Fleet(targets=targets):
            _one_target_for_ids(request)
            if not request.commit:
                yield _dry_run_across(targets, access, request)
            else:
                yield from _commit_across(targets, access, request)
        case db.Settings() as settings:
            yield from _on_one(settings, access, request)


def _one_target_for_ids(request: Request) -> None:
    if request.expired.ids:
        raise errors.UsageError("--id: ids are per database: give one --target with it")


def serve(
    where: fleet.Where,
    request: Request,
    *,
    served: Served,
    say: fleet.Say,
    watch: Watch | None = None,
) -> Reclaimed:
    """The reclaimer service (``request.every``) on one database or on every target, until
    SIGTERM or SIGINT: each batch's applied rows to ``served`` (tagged with their target
    across targets), its lines to ``say`` as they happen; ``watch``: one database's
    notifications."""
    match where:
        case Fleet(targets=targets):
            _one_target_for_ids(request)
            return _served_across(targets, request, served=served, say=say)
        case db.Settings() as settings:
            return _served_one(settings, request, served=served, say=say, watch=watch)


def _on_one(settings: db.Settings, access: Access, request: Request) -> Iterator[Step]:
    """One database's dry run (streamed) or commit, drained on its session."""
    from jobctl.ops import lost_server, sessions, standby

    told = repeated_ids.LeftOut()  # ids two rows hold: left out by every read and write
    request = dataclasses.replace(
        request, expired=dataclasses.replace(request.expired, left_out=told)
    )
    said: list[str] = []
    with sessions.open(settings, access, say=said.append) as (s, standing):
        yield from (Said(line) for line in said)
        started = yield from one_database.start(s, request, standing=standing)
        left = row_errors.LeftAlone()  # rows whose update raised: named once, exit 1
        tally = Tally(request.whole)
        started.batches = _explained(
            s,
            tally.counted(
                left.watch(
                    lost_server.reclaimed(
                        started.batches, request.batch_size, s.settings.resolved_dsn()
                    )
                )
            ),
        )
        yield started  # drained by the consumer
        park_status = s.table.mapping.named_park
        after = started.after() if started.after is not None else 0
        with s.transaction(read_only=True):
            left_out = told.lines(s)  # named once, under the rest: exit 1
    summary = OneDatabase(
        tally.counts,
        request.commit,
        park_status=park_status,
        spread=request.expired.spread,
        note=None if request.commit else standby.dry_run_note(standing),
        expired_after=after,
        left_alone=tuple(left.ids),
    )
    yield Reclaimed(
        tally=tally,
        summary=summary,
        plan=request.save_plan,
        left_alone=left.ids,
        left_out=left_out,
    )


def _explained(s: Session, batches: Iterator[list[ReclaimRow]]) -> Iterator[list[ReclaimRow]]:
    """``batches`` drained by the consumer as if inside the session (``sessions.open``): a
    statement failing on a column the table lacks says why jobctl does not serve it."""
    from jobctl.schema import unserved

    with unserved.explained(s):
        yield from batches


def _dry_run_across(targets: Sequence[Target], access: Access, request: Request) -> Reclaimed:
    """Every target's dry run, read at once (its plan across targets saved, if asked)."""
    outcomes, parks = across_targets.dry_run(targets, request, access)
    found = [(o.target.name, o.value[1]) for o in outcomes if o.value is not None]
    tallies = {name: Tally.of(rows, request.whole) for name, rows in found}
    counts = {name: tally.counts for name, tally in tallies.items()}
    every_row = None  # a table shows the rows the tallies kept, a machine format every one
    if request.whole is None:
        every_row = [
            cast(ReclaimRow, row) for name, rows in found for row in fleet.tagged(name, rows)
        ]
    return Reclaimed(
        tally=Tally.across(tallies),
        found=every_row,
        summary=AcrossTargets(counts, parks, committed=False),
        outcomes=list(outcomes),
        plan=request.save_plan,
        plan_targets=[name for name, _ in found],
    )


def _commit_across(targets: Sequence[Target], access: Access, request: Request) -> Iterator[Step]:
    """The commit target after target, after one question (``across_targets.start``)."""
    started = yield from across_targets.start(targets, request, access)
    if not started.targets:  # none left to commit: nothing shown, nothing counted
        yield Reclaimed(unreachable=started.unreachable)
        return
    tally = Tally(request.whole)
    # drained by the consumer; kind and queue in a machine format's header whatever the
    # targets map (each may differ): an empty field where a target maps none
    yield Run(tally.counted(started.batches), started.total, optional=RECLAIM_OPTIONAL_KEYS)
    counts = {name: done.counts for name, done in started.done.items()}
    yield Reclaimed(
        tally=tally,
        summary=AcrossTargets(counts, started.parks, committed=True),
        outcomes=started.outcomes,
        unreachable=started.unreachable,
    )


def _served_one(
    settings: db.Settings,
    request: Request,
    *,
    served: Served,
    say: fleet.Say,
    watch: Watch | None,
) -> Reclaimed:
    """One database's reclaimer service until SIGTERM or SIGINT."""
    from jobctl.ops.reclaim import service

    assert request.every is not None
    service.run(
        settings,
        request.expired,
        batch_size=request.batch_size,
        every=request.every,
        on_batch=served,
        log=say,
        watch=watch,
    )
    return Reclaimed()


def _served_across(
    targets: Sequence[Target], request: Request, *, served: Served, say: fleet.Say
) -> Reclaimed:
    """Every target's reclaimer service from one process until SIGTERM or SIGINT (a thread,
    a connection and a backoff each: one target down never stops the others; a target with
    a problem in the config file is never served)."""
    from jobctl.ops.reclaim import service

    every = request.every
    assert every is not None
    unusable = [t for t in targets if t.problem]
    for t in unusable:  # never served from another DSN (JOBCTL_DSN) in its stead
        say(f"jobctl: error: target {t.name}: {t.problem}: not served")
    usable = [t for t in targets if not t.problem]
    if not usable:
        raise errors.UsageError("no target can be served")
    stopped = service.run_many(
        [(t.name, t.settings) for t in usable],
        request.expired,
        batch_size=request.batch_size,
        every=every,
        on_batch=lambda name, applied: served(
            cast(list[ReclaimRow], list(fleet.tagged(name, applied)))
        ),
        log=say,
    )
    return Reclaimed(unserved=[*(t.name for t in unusable), *stopped])
