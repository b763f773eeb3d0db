"""The core's commands that write: ``reclaim`` (its dry run, its commit, its plans, the
service) and the operator's writes by hand (``requeue``, ``fail``; ``cancel`` on these
helpers), each fenced by attempt_token and audited in the core (``reclaim``, ``manual``,
``review``, ``service``).

Registered by ``cli``, in the order ``jobctl --help`` lists them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, Annotated, TypeVar, cast

import typer

from jobctl import errors
from jobctl.cli import context, terminal
from jobctl.cli import options as opt
from jobctl.cli.bundles import Bundle
from jobctl.cli.commands import monitoring
from jobctl.contract import shapes
from jobctl.render import output, reclaim_lines, rows, views, write_lines

if TYPE_CHECKING:
    from jobctl.ops import bulk, by_hand, manual
    from jobctl.ops.reclaim.steps import Reclaimed, Run


T = TypeVar("T")


# ---------------------------------------------------------------- reclaim
def reclaim_command(
    ctx: typer.Context,
    commit: opt.Commit = False,
    yes: opt.Yes = False,
    batch_size: opt.BatchSize = 50,
    limit: opt.Limit = None,
    worker: opt.Worker = None,
    policy: opt.Policy = None,
    job_ids: opt.OnlyIds = None,
    grace: opt.Grace = dt.timedelta(0),
    save_plan: opt.SavePlan = None,
    plan: opt.ApplyPlan = None,
    every: opt.ServeEvery = None,
    trust_replica: opt.TrustReplica = False,
    slicing: opt.Slicing = opt.ANY_JOB,
    spread: opt.Spread = dt.timedelta(0),
    refund_attempt: opt.RefundAttempt = False,
    park_older_than: opt.ParkOlderThan = None,
    notify: monitoring.Asked = monitoring.NO_NOTIFY,
    full: opt.Full = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Reclaim expired leases: auto jobs with attempts left are requeued, the rest failed.

    The dry run (default) changes nothing and shows each decision; --commit shows it and asks,
    then applies exactly the rows shown, in batches, each a short transaction fenced by the
    attempt token (leases that expire while it asks are left, and counted). --yes asks
    nothing: it reclaims what is expired when each batch runs. A table shows the first 20
    rows and any skipped; every row with -o jsonl, json or csv. A worker's name, kind or
    queue longer than 4096 characters is cut, with a note (in the plan too); --full: whole.
    Examples: jobctl reclaim --commit; jobctl reclaim --save-plan p.json; jobctl reclaim
    --commit --plan p.json
    """
    from jobctl.ops import fleet
    from jobctl.ops.reclaim import run as core
    from jobctl.ops.reclaim.request import Request
    from jobctl.ops.reclaim.steps import Asked, Reclaimed, Run, Said, Unreachable

    which = context.expired(
        slicing,
        worker=worker,
        policy=policy,
        ids=job_ids,
        grace=grace,
        spread=spread,
        refund_attempt=refund_attempt,
        park_older_than=park_older_than,
        full=full,
    )
    request = Request(
        commit=commit,
        batch_size=batch_size,
        limit=limit,
        expired=which,
        save_plan=save_plan,
        plan=plan,
        every=every,
        yes=yes,
        trust_replica=trust_replica,
        # a table shows the first rows of a commit (kept by the run's tally) and counts the
        # rest: those come back with their id and action alone (the machine formats print
        # every row whole)
        whole=terminal.TABLE_ROWS if out.tabular else None,
    )
    where = context.address(ctx)
    monitoring.served(where, every, notify)  # --notify is the service's: exit 2 without it
    several = fleet.several(where)
    shown = _ReclaimShown(several, out, fmt, context.invocation(ctx).again(targets=not several))
    if every is not None:  # the service runs for long, its command line visible all along
        context.warn_password_on_command_line(ctx)
        with monitoring.for_reclaim_service(where, every, notify) as watch:
            done = core.serve(where, request, served=shown.served, say=terminal.say, watch=watch)
        shown.said(done)
        return
    with contextlib.closing(core.run(where, context.command_access(ctx), request)) as steps:
        for step in steps:  # closed on the way out: a question refused writes nothing
            match step:
                case Said(line=line):
                    terminal.say(line)
                case Unreachable(outcomes=failed):
                    context.exit_code(failed)
                case Asked(question=question, rows=about):
                    asking = reclaim_lines.asked(question)
                    context.say_if(asking.before)
                    terminal.confirm(asking.question, about, asking.title)
                case Run():
                    shown.drain(step)
                case Reclaimed():
                    shown.said(step)


class _ReclaimShown:
    """``reclaim``'s rows and lines as its output shows them, on one database or across
    targets (each row with its target, first)."""

    def __init__(self, several: bool, out: output.Output, fmt: str | None, again: str) -> None:
        self.several, self.out, self.fmt = several, out, fmt
        self.again = again  # the global options the command it prints repeats

    def drain(self, run: Run) -> None:
        """The batches printed as they come (``terminal.drain``)."""
        columns = ["target", *rows.RECLAIM_KEYS] if self.several else rows.RECLAIM_KEYS
        terminal.drain(run.batches, run.total, run.optional, self.out, self.fmt, columns=columns)

    def served(self, applied: list[shapes.ReclaimRow]) -> None:
        """A batch of the service."""
        terminal.emit_reclaimed(applied, self.out, self.fmt, across_targets=self.several)

    def said(self, done: Reclaimed) -> None:
        """After the batches: the table, the lines, what the targets said, the plan, the exit."""
        if not self.several:
            if done.tally is not None:
                terminal.emit_reclaim(done.tally.kept, done.tally.total, self.out, self.fmt)
        else:
            doc = self._across(done)
            if doc is not None:
                terminal.emit(views.across_targets(doc), self.out, self.fmt)
        for line in [] if done.summary is None else reclaim_lines.said(done.summary, self.again):
            terminal.say(line)
        for line in done.left_out:
            terminal.say(line)
        context.exit_code(done.outcomes)
        context.say_if(reclaim_lines.plan_line(done.plan, done.plan_targets, self.again))
        context.exit_with(done.exit_code)

    def _across(self, done: Reclaimed) -> output.Document | None:
        """The table across targets: what the tally kept (a dry run: each target's first rows
        and skipped ones; a commit: the first and skipped ones, the rest printed as they came),
        or a dry run's every row in a machine format."""
        if done.found is not None and not self.out.tabular:  # kind, queue: whatever is mapped
            keys = rows.with_optional(rows.RECLAIM_KEYS, rows.RECLAIM_OPTIONAL_KEYS)
            return views.table(done.found, done.found, rows.RECLAIM_COLUMNS, keys=keys)
        if done.tally is None or not self.out.tabular:
            return None
        kept, total = done.tally.kept, done.tally.total
        return views.some_rows(kept, total, rows.RECLAIM_COLUMNS, views.RECLAIM_VIEW)


# ---------------------------------------------------------------- operator writes
# requeue, fail and cancel: the operator's writes by hand
Delay = Annotated[
    dt.timedelta, opt.Duration("Make it available after this long.", show_default="0s")
]
Park = Annotated[
    bool,
    typer.Option(
        "--park", help="Put the job in the park status (a human decides) instead of failed."
    ),
]


@dataclasses.dataclass(frozen=True)
class ByHand(Bundle):
    """requeue's, fail's and cancel's options, in their ``--help``'s order: which jobs (ids,
    a saved plan, or a filter), why, how, the confirmation. Each command's bundle is this one
    with what it does not take fixed (``init=False``: no option, the value its write uses)
    and its own --reason (``Requeue``, ``Fail``, ``Cancel``); ``by_hand_or_filter`` is the
    path all three take."""

    job_ids: opt.JobIdsOrStdin = None
    plan: opt.ReviewPlan = None
    reason: opt.Reason = None
    delay: Delay = dt.timedelta(0)
    park: Park = False
    expect_token: opt.ExpectToken = None
    force: opt.Force = False
    yes: opt.Yes = False
    slicing: opt.Slicing = opt.ANY_JOB
    status: opt.BulkStatuses = None
    bulk: opt.Bulk = opt.BULK_DEFAULTS
    save_plan: opt.BulkSavePlan = None
    spread: opt.Spread = dt.timedelta(0)


@dataclasses.dataclass(frozen=True)
class Requeue(ByHand):
    """requeue: its reason optional; never parks."""

    park: bool = dataclasses.field(default=False, init=False)


@dataclasses.dataclass(frozen=True)
class Fail(ByHand):
    """fail: at once (no --delay, --spread), never parked (no --park); its reason required."""

    reason: opt.RequiredReason = ""
    delay: dt.timedelta = dataclasses.field(default=dt.timedelta(0), init=False)
    park: bool = dataclasses.field(default=False, init=False)
    spread: dt.timedelta = dataclasses.field(default=dt.timedelta(0), init=False)


@dataclasses.dataclass(frozen=True)
class Cancel(ByHand):
    """cancel: a live lease is the point (always --force), the running jobs its filter
    lists (no --status), at once (no --delay, --spread); the reason required."""

    reason: opt.RequiredReason = ""
    delay: dt.timedelta = dataclasses.field(default=dt.timedelta(0), init=False)
    force: bool = dataclasses.field(default=True, init=False)
    status: list[str] | None = dataclasses.field(default=None, init=False)
    spread: dt.timedelta = dataclasses.field(default=dt.timedelta(0), init=False)


REQUEUE, FAIL, CANCEL = Requeue(), Fail(), Cancel()


def requeue(
    ctx: typer.Context,
    asked: Requeue = REQUEUE,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Requeue jobs by hand (status queued, lease and token cleared), fenced and audited.

    --plan FILE requeues the rows of a saved review plan, each only if unchanged since the
    review; - reads ids from stdin (one per line, or JSON lines with an id). A filter
    (--kind, --queue, --error, --status, --worker, --older-than, --no-lease) instead of ids
    lists the jobs it matches: --save-plan FILE saves them as a plan, --yes requeues exactly those.
    Example: jobctl requeue 42 --reason "charge not captured, safe to retry" --yes
    """
    by_hand_or_filter(ctx, "requeue", asked, out, fmt)


def fail(
    ctx: typer.Context,
    asked: Fail = FAIL,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Fail jobs by hand (status failed, last_error = reason), fenced and audited.

    A job reclaim failed that awaits review may be failed for good; with --force, a job whose
    lease is live is cancelled (jobctl cancel: the same write and event). --plan FILE fails the
    rows of a saved review plan, each only if unchanged since the review; - reads ids from
    stdin (one per line, or JSON lines with an id). A filter instead of ids lists the jobs
    it matches: --save-plan FILE saves them as a plan, --yes fails exactly those.
    Example: jobctl fail 42 --reason "customer refunded by support" --yes
    """
    by_hand_or_filter(ctx, "fail", asked, out, fmt)


def by_hand_or_filter(
    ctx: typer.Context,
    action: manual.Action,
    asked: ByHand,
    out: output.Output,
    fmt: str | None,
) -> None:
    """``requeue``, ``fail`` and ``cancel``: their one request and workflow (``by_hand``);
    on a filter (or nothing given: what is missing said), the jobs it lists; else the ids
    given (``-``: read from stdin) or a saved plan's rows."""
    from jobctl.ops import by_hand
    from jobctl.ops import review as core

    request = by_hand.Request(
        action,
        tuple(asked.job_ids or ()),
        plan=asked.plan,
        reason=asked.reason,
        delay=asked.delay,
        park=asked.park,
        expect_token=asked.expect_token,
        force=asked.force,
        yes=asked.yes,
        which=bulk_filter(asked.slicing, asked.status, asked.bulk),
        save_plan=asked.save_plan,
        spread=asked.spread,
    )
    if request.from_stdin:
        request = dataclasses.replace(request, job_ids=tuple(core.read_ids(sys.stdin.read())))
    with context.open_session(ctx) as s:
        done = answered(by_hand.run(s, request))
        keys = rows.bulk_keys(s.table.mapping.mapped_optional)  # the same with no row
    if isinstance(done, by_hand.Matched):
        _matched(request, done, keys, out, fmt, context.invocation(ctx).again())
    else:
        terminal.report(done, out, fmt)


def answered(steps: Generator[manual.Asked, None, T]) -> T:
    """A write's steps consumed: each question asked of the person (no, or Ctrl-C, closes
    the steps: nothing written), what it did returned."""
    with contextlib.closing(steps):
        try:
            step = next(steps)
            while True:
                said = write_lines.question(step.verb, len(step.rows))
                terminal.confirm(said.question, step.rows, said.title)
                step = next(steps)
        except StopIteration as done:
            return cast(T, done.value)


def bulk_filter(
    slicing: opt.Slicing, status: list[str] | None, options: opt.Bulk
) -> bulk.BulkFilter:
    """``requeue``, ``fail`` and ``cancel``'s filter as the core's (empty: no filter given)."""
    from jobctl.ops import bulk

    return bulk.BulkFilter(
        slicing.slice(),
        tuple(v.strip() for value in status or () for v in value.split(",") if v.strip()),
        options.worker,
        options.older_than,
        options.limit,
        options.no_lease,
    )


def _matched(
    request: by_hand.Request,
    done: by_hand.Matched,
    keys: list[str],
    out: output.Output,
    fmt: str | None,
    again: str,
) -> None:
    """``requeue`` / ``fail`` / ``cancel`` on a filter: the jobs it matched and their count;
    saved as a plan (the command that applies it repeats ``again``, the global options), or
    (--yes) their outcomes, each written fenced as listed."""
    listed, action = done.listed, request.action
    found = listed.rows
    code = errors.EXIT_ERROR if listed.left_out else errors.EXIT_OK
    if not found:
        if not out.tabular:  # a machine format: its header (--yes: the outcomes'), no row
            shape = rows.MANUAL_KEYS if request.yes else keys
            terminal.emit(views.table([], [], keys=shape), out, fmt)
        _left_out(listed)
        left_out = bool(listed.refused or listed.left_out)
        terminal.say(write_lines.nothing_matched(action, left_out=left_out))
        context.exit_with(code)
        return
    if done.report is not None:
        _left_out(listed)
        terminal.say(write_lines.matched_written(len(found)))
        terminal.report(done.report, out, fmt)  # exits with the worst outcome's code, if not 0
        context.exit_with(code)
        return
    shown = rows.with_optional(rows.BULK_COLUMNS, found)
    terminal.emit(views.table(found, found, shown, views.BULK_VIEW, keys), out, fmt)
    _left_out(listed)
    limit = request.which.limit if listed.at_limit else None
    terminal.say(
        write_lines.matched(action, len(found), limit=limit, saved=done.saved, again=again)
    )
    context.exit_with(code)


def _left_out(listed: bulk.Listed) -> None:
    """What a bulk write's filter left out, on stderr: the jobs the rules refuse, and each id
    two rows hold (exit 1: the picture is partial)."""
    if listed.refused:
        first = listed.refused[0]
        terminal.say(write_lines.refused(len(listed.refused), first.id, first.detail))
    for line in listed.left_out:
        terminal.say(line)
