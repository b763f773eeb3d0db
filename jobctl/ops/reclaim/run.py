"""``jobctl reclaim``'s workflow (``run``), the one the command calls whatever the number of
targets. One database is a fleet of one that keeps its own path: its dry run streamed, or its
commit after one question, batch after batch (``one_database.start``), its lines said at
once and its failure raised. Across targets the dry run reads every target at once, and the
commit runs target after target after one question (``across_targets``). With ``--every``:
the reclaimer service, for one database or for every target from one process (``service``).

The batches are counted here as they pass (``tally.Tally``), and handed to ``drain``, which
prints them. What it did (or, a dry run, would do) comes back as ``Reclaimed``: its tally
(the counts, and the rows a table shows), the lines under it, the targets' outcomes.
Example::

    done = run(settings, Access("reclaim"), Request(), trust_replica=False, confirm=ask,
               say=print, unreachable=print_failures, drain=drain, served=print_batch)
    for line in done.lines:
        print(line)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from jobctl import db, errors
from jobctl.contract.shapes import ReclaimRow
from jobctl.ops import fleet, repeated_ids
from jobctl.ops.reclaim import across_targets, one_database, row_errors
from jobctl.ops.reclaim.tally import Tally
from jobctl.render import reclaim_lines
from jobctl.targets import Fleet

if TYPE_CHECKING:
    from jobctl.db.session import Confirm
    from jobctl.ops.notify import Watch
    from jobctl.ops.reclaim.request import Request
    from jobctl.ops.sessions import Access
    from jobctl.targets import Target

Drain = Callable[[one_database.Run], None]  # prints a reclaim's batches as they come (counted)
Served = Callable[[list[ReclaimRow]], None]  # a service's batch, its applied rows (tagged)
Failed = Callable[[list[fleet.Outcome[Any]]], object]  # told of targets that failed a preview


@dataclasses.dataclass
class Reclaimed:
    """What ``run`` did, or (a dry run) would do, for the command to show, in this order: its
    ``tally`` (the rows a table shows, ``kept``, of its ``total``; None: nothing drained, no
    table) or, a dry run across targets in a machine format (``Request.whole`` None), every
    row with its target (``found``, printed at the end); the ``lines`` under them; what the
    targets said and why any failed (``outcomes``); the ``plan_line``. ``unreachable``: the
    targets that failed before the question (said then); ``unserved``: the targets whose
    service stopped on an error or never started."""

    tally: Tally | None = None
    found: list[ReclaimRow] | None = None
    lines: list[str] = dataclasses.field(default_factory=list)
    outcomes: list[fleet.Outcome[Any]] = dataclasses.field(default_factory=list)
    plan_line: str | None = None
    unreachable: list[fleet.Outcome[Any]] = dataclasses.field(default_factory=list)
    unserved: list[str] = dataclasses.field(default_factory=list)
    left_alone: list[str] = dataclasses.field(default_factory=list)  # rows whose update raised
    left_out: list[str] = dataclasses.field(default_factory=list)  # ids two rows hold

    @property
    def exit_code(self) -> int:
        """1 when a target failed or was not served, a row's update raised, or an id two rows
        hold was left out (the picture is partial), else 0."""
        if self.unserved or self.left_alone or self.left_out:
            return errors.EXIT_ERROR
        return fleet.exit_code([*self.unreachable, *self.outcomes])


def run(
    where: fleet.Where,
    access: Access,
    request: Request,
    *,
    trust_replica: bool,
    confirm: Confirm,
    say: fleet.Say,
    unreachable: Failed,
    drain: Drain,
    served: Served,
    watch: Watch | None = None,
) -> Reclaimed:
    """The reclaim ``request`` asks for, on one database or on the targets of a fleet: its
    dry run, its commit (``confirm`` asked first, unless ``request.yes``; across targets
    ``unreachable`` told first of the targets the preview could not read), or the service
    (each batch to ``served``, rows tagged with their target across targets; ``watch``: one
    database's notifications). ``drain`` prints the batches of a dry run streamed or of a
    commit, counted as they pass. ``trust_replica``: a standby's rows taken as the primary's,
    lag or not."""
    match where:
        case Fleet(targets=targets):
            if request.expired.ids:
                raise errors.UsageError("--id: ids are per database: give one --target with it")
            if request.every is not None:
                return _served_across(targets, request, served=served, say=say)
            if not request.commit:
                return _dry_run_across(targets, access, request, trust_replica)
            return _commit_across(
                targets,
                access,
                request,
                confirm=confirm,
                say=say,
                unreachable=unreachable,
                drain=drain,
            )
        case db.Settings() as settings:
            if request.every is not None:
                return _served_one(settings, request, served=served, say=say, watch=watch)
            return _on_one(
                settings, access, request, trust_replica, confirm=confirm, say=say, drain=drain
            )


def _on_one(
    settings: db.Settings,
    access: Access,
    request: Request,
    trust_replica: bool,
    *,
    confirm: Confirm,
    say: fleet.Say,
    drain: Drain,
) -> Reclaimed:
    """One database's dry run (streamed) or commit, drained on its session."""
    from jobctl.ops import lost_server, sessions, standby

    told = repeated_ids.LeftOut()  # ids two rows hold: left out by every read and write
    request = dataclasses.replace(
        request, expired=dataclasses.replace(request.expired, left_out=told)
    )
    with sessions.open(settings, access, say=say) as (s, standing):
        started = one_database.start(
            s, request, confirm, standing=standing, trust_replica=trust_replica
        )
        left = row_errors.LeftAlone()  # rows whose update raised: named once, exit 1
        tally = Tally(request.whole)
        started.batches = tally.counted(
            left.watch(
                lost_server.reclaimed(
                    started.batches, request.batch_size, s.settings.resolved_dsn()
                )
            )
        )
        drain(started)
        park_status = s.table.mapping.named_park
        after = started.after() if started.after is not None else None
        with s.transaction(read_only=True):
            left_out = told.lines(s)  # named once, under the rest: exit 1
    said = reclaim_lines.one_database(
        tally.counts,
        request.commit,
        park_status=park_status,
        spread=request.expired.spread,
        note=None if request.commit else standby.dry_run_note(standing),
    )
    return Reclaimed(
        tally=tally,
        lines=[*said, *filter(None, [after, left.line()]), *left_out],
        plan_line=reclaim_lines.plan_line(request.save_plan, None),
        left_alone=left.ids,
        left_out=left_out,
    )


def _dry_run_across(
    targets: Sequence[Target], access: Access, request: Request, trust_replica: bool
) -> Reclaimed:
    """Every target's dry run, read at once (its plan across targets saved, if asked)."""
    outcomes, parks = across_targets.dry_run(targets, request, access, trust_replica=trust_replica)
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
        lines=reclaim_lines.across_targets(counts, parks, committed=False),
        outcomes=list(outcomes),
        plan_line=reclaim_lines.plan_line(request.save_plan, [name for name, _ in found]),
    )


def _commit_across(
    targets: Sequence[Target],
    access: Access,
    request: Request,
    *,
    confirm: Confirm,
    say: fleet.Say,
    unreachable: Failed,
    drain: Drain,
) -> Reclaimed:
    """The commit target after target, after one question (``across_targets.start``)."""
    started = across_targets.start(
        targets, request, access, confirm=confirm, say=say, unreachable=unreachable
    )
    if not started.targets:  # none left to commit: nothing shown, nothing counted
        return Reclaimed(unreachable=started.unreachable)
    tally = Tally(request.whole)
    drain(one_database.Run(tally.counted(started.batches), started.total))
    counts = {name: done.counts for name, done in started.done.items()}
    return Reclaimed(
        tally=tally,
        lines=reclaim_lines.across_targets(counts, started.parks, committed=True),
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
