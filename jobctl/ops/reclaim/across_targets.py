"""Reclaim across several targets (``--all-targets``, or ``--target`` more than once): the
dry run reads every target at once (``dry_run``, a plan across targets saved from it); the
commit runs target after target, each its own fenced batches (``batches.committed``), after
one confirmation — of a plan across targets, or of every target's dry run, read at once;
each target's tally is kept (``reclaim_lines.across_targets`` says what each did and the
total).

A target that fails is its outcome's error: what it committed before stays committed, and
counted; the others go on. Example::

    run = yield from across_targets.start(targets, request, access)  # its question yielded
    for batch in run.batches:   # every row tagged with its target
        ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from jobctl import errors
from jobctl.contract import shapes
from jobctl.ops import fleet
from jobctl.ops.reclaim.steps import Asked, Unreachable
from jobctl.ops.reclaim.tally import Tally
from jobctl.render.reclaim_lines import Question

if TYPE_CHECKING:
    from jobctl.db.session import Session
    from jobctl.ops.plans import Parts
    from jobctl.ops.reclaim.request import Request
    from jobctl.ops.sessions import Access
    from jobctl.ops.standby import Standing
    from jobctl.targets import Target

PLANS_FORMAT = "jobctl-reclaim-plans/1"  # a reclaim plan across targets (plans.write_parts)
Reviewed = tuple[dict[str, Any], list[shapes.ReclaimRow]]  # a target's dry run: where, its rows


def dry_run(
    targets: Sequence[Target], request: Request, access: Access
) -> tuple[list[fleet.Outcome[Reviewed]], dict[str, str | None]]:
    """Every target's dry run, read at once (a standby's widened by its lag unless
    ``request.trust_replica``, and said to be one), with the park status of each that answered; with
    ``request.save_plan``, the plan across targets of those that answered saved."""
    from jobctl.ops import plans, standby
    from jobctl.ops.reclaim import batches as core

    parks: dict[str, str | None] = {}

    def read(s: Session, st: Standing, say: fleet.Say) -> Reviewed:
        found = core.dry_run(
            s, standby.widen(request.expired, st, trust=request.trust_replica), request.limit
        )
        note = standby.dry_run_note(st)
        if note:
            say(note)
        parks[s.settings.target or ""] = s.table.mapping.named_park
        return s.origin(), found

    outcomes = fleet.read(targets, access, read)
    if request.save_plan is not None:
        answered = [o.value for o in outcomes if o.value is not None]
        plans.write_parts(request.save_plan, PLANS_FORMAT, answered)
    return outcomes, parks


@dataclasses.dataclass
class Commit:
    """A commit across targets under way: drain ``batches`` (every target's, tagged, target
    after target); ``done`` and ``parks`` fill as they go (each target's tally, and its park
    status); ``outcomes`` the targets committed, ``unreachable`` those that failed the
    preview (not committed). ``total``: the rows expected, when a preview or plan said."""

    batches: Iterator[list[shapes.ReclaimRow]]
    total: int | None
    targets: list[Target]
    unreachable: list[fleet.Outcome[Any]] = dataclasses.field(default_factory=list)
    done: dict[str, Tally] = dataclasses.field(default_factory=dict)
    parks: dict[str, str | None] = dataclasses.field(default_factory=dict)
    outcomes: list[fleet.Outcome[Any]] = dataclasses.field(default_factory=list)


def start(
    targets: Sequence[Target], request: Request, access: Access
) -> Generator[Unreachable | Asked, None, Commit]:
    """Begin the commit ``request`` asks for on ``targets`` (its ``Commit`` the generator's
    return value): a plan across targets (its targets must all be addressed), or the
    filter's expired rows, previewed on every target at once unless ``request.yes``. Before
    the question (yielded, with each target's count: it goes on once resumed) it yields the
    targets the preview could not read. With no target left to commit, the run has no
    ``targets`` (and asks nothing)."""
    from jobctl.ops import plans
    from jobctl.ops.reclaim.plans import PLAN_COLUMNS

    planned: Parts = {}
    failed: list[fleet.Outcome[Any]] = []
    total: int | None = None
    if request.plan is not None:
        planned = plans.read_parts(request.plan, PLANS_FORMAT, PLAN_COLUMNS)
        total = sum(len(r) for _, r in planned.values())
        targets = _planned_targets(request, planned, targets)
        if not request.yes:
            by_target = tuple((name, len(r), None) for name, (_, r) in planned.items())
            yield Asked(Question(total, plan=request.plan, by_target=by_target))
    elif not request.yes:
        preview = _previewed(targets, request, access)
        failed = [o for o in preview if not o.ok]
        targets = [o.target for o in preview if o.ok]
        if failed:  # why, before the question
            yield Unreachable(failed)
        if not targets:
            return Commit(iter(()), 0, [], failed)
        found = [row for o in preview for row in fleet.tagged(o.target.name, o.value or [])]
        total = len(found)
        yield Asked(
            Question(
                total,
                by_target=tuple(
                    (o.target.name, len(o.value), sum(r["action"] == "requeue" for r in o.value))
                    for o in preview
                    if o.value is not None
                ),
                not_on=tuple(o.target.name for o in failed),
            ),
            cast(list[shapes.ReclaimRow], found),
        )
        # what was confirmed is what is written: each target's previewed rows are its plan,
        # fenced as shown (a lease that expires while the question is up is left)
        planned = {
            o.target.name: ({}, cast(list[shapes.Row], o.value or [])) for o in preview if o.ok
        }
    run = Commit(iter(()), total, list(targets), failed)
    run.batches = _committed(run, request, planned)
    return run


def _planned_targets(request: Request, planned: Parts, targets: Sequence[Target]) -> list[Target]:
    """The targets a plan across targets names (each must be addressed)."""
    known = {t.name for t in targets}
    missing = [name for name in planned if name not in known]
    if missing:
        raise errors.UsageError(
            f"plan {request.plan} holds rows of target {missing[0]}, which this command "
            f"does not address: add --target {missing[0]} (or use --all-targets)"
        )
    return [t for t in targets if t.name in planned]


def _previewed(
    targets: Sequence[Target], request: Request, access: Access
) -> list[fleet.Outcome[list[shapes.ReclaimRow]]]:
    """Every target's dry run, read at once: what the question shows."""
    from jobctl.ops.reclaim import batches as core

    return fleet.read(
        targets, access, lambda s, _st, _say: core.dry_run(s, request.expired, request.limit)
    )


def _committed(run: Commit, request: Request, planned: Parts) -> Iterator[list[shapes.ReclaimRow]]:
    """The batches of every target's commit, tagged, target after target: a target that fails
    is its outcome's error (what it committed before stays committed, and counted)."""
    from jobctl.ops import lost_server, plans, sessions
    from jobctl.ops.reclaim import batches as core

    commit = sessions.Access("reclaim", writes=True, widened=True)
    for target in run.targets:
        outcome: fleet.Outcome[Any] = fleet.Outcome(target)
        run.outcomes.append(outcome)
        tally = run.done[target.name] = Tally()
        try:
            if target.problem:
                raise errors.JobctlError(target.problem)
            with sessions.open(target.settings, commit, say=outcome.said.append) as (s, _):
                run.parks[target.name] = s.table.mapping.named_park
                plan_rows = None
                if target.name in planned:  # a saved plan's rows, or the confirmed preview's
                    made, plan_rows = planned[target.name]
                    if request.plan is not None:
                        plans.check_origin(request.plan, made, s.origin())
                batches = core.committed(s, request, plan_rows)
                # a server lost mid-way: its line says how many it committed before the loss
                batches = lost_server.reclaimed(
                    batches, request.batch_size, target.settings.resolved_dsn()
                )
                for batch in tally.counted(batches):
                    yield cast(list[shapes.ReclaimRow], list(fleet.tagged(target.name, batch)))
        except errors.JobctlError as exc:
            outcome.error = exc
