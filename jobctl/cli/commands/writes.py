"""The commands that write: ``reclaim`` (its dry run, its commit, its plans, the service) and
the operator's writes by hand (``requeue``, ``fail``, ``quarantine``, ``policy``), each fenced
by attempt_token and audited in the core (``reclaim``, ``manual``, ``review``, ``service``).

Registered by ``cli``, in the order ``jobctl --help`` lists them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jobctl import errors
from jobctl.cli import context, parameters, terminal
from jobctl.cli import options as opt
from jobctl.cli.bundles import Bundle
from jobctl.cli.commands import monitoring
from jobctl.contract import shapes
from jobctl.render import output, reclaim_lines, rows, views

if TYPE_CHECKING:
    from jobctl.ops import bulk, manual
    from jobctl.ops.reclaim.steps import Reclaimed, Run


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
    shown = _ReclaimShown(fleet.several(where), out, fmt)
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

    def __init__(self, several: bool, out: output.Output, fmt: str | None) -> None:
        self.several, self.out, self.fmt = several, out, fmt

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
        for line in [] if done.summary is None else reclaim_lines.said(done.summary):
            terminal.say(line)
        for line in done.left_out:
            terminal.say(line)
        context.exit_code(done.outcomes)
        context.say_if(reclaim_lines.plan_line(done.plan, done.plan_targets))
        context.exit_with(done.exit_code)

    def _across(self, done: Reclaimed) -> output.Document | None:
        """The table across targets: what the tally kept (a dry run: each target's first rows
        and skipped ones; a commit: the first and skipped ones, the rest printed as they came),
        or a dry run's every row in a machine format."""
        if done.found is not None and not self.out.tabular:
            return views.table(done.found, done.found, rows.RECLAIM_COLUMNS, keys=rows.RECLAIM_KEYS)
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
    """``requeue``, ``fail`` and ``cancel``: on a filter (or nothing given: what is missing
    said), the jobs it lists; else the ids given or a saved plan's rows."""
    which = bulk_filter(asked.slicing, asked.status, asked.bulk)
    if which or not (asked.job_ids or asked.plan):
        ids_or_plan_not_with_a_filter(asked.job_ids, asked.plan, asked.expect_token)
        bulk_write(ctx, action, which, asked, out, fmt)
        return
    no_save_plan_without_a_filter(asked.save_plan)
    terminal.report(by_hand(ctx, action, asked), out, fmt)


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


def ids_or_plan_not_with_a_filter(
    job_ids: list[str] | None, plan: Path | None, expect_token: object
) -> None:
    if job_ids or plan is not None or expect_token is not None:
        raise errors.UsageError(
            "give job ids (or --plan FILE) or a filter (--kind, --queue, --error, --status, "
            "--worker, --older-than), not both"
        )


def no_save_plan_without_a_filter(save_plan: Path | None) -> None:
    if save_plan is not None:
        raise errors.UsageError(
            "--save-plan saves the jobs a filter lists (--kind, --queue, --error ...): "
            "with ids, act on them directly"
        )


def bulk_write(
    ctx: typer.Context,
    action: manual.Action,
    which: bulk.BulkFilter,
    asked: ByHand,
    out: output.Output,
    fmt: str | None,
) -> None:
    """``requeue`` / ``fail`` / ``cancel`` on a filter: list the jobs it matches and their
    count; then save them as a plan, or (--yes) write exactly those, each fenced as listed."""
    from jobctl.ops import bulk, manual
    from jobctl.ops import review as core

    reason, yes, save_plan = asked.reason, asked.yes, asked.save_plan
    if save_plan is not None and yes:
        raise errors.UsageError(
            "--save-plan lists and saves, --yes writes: give one (apply a plan with --plan)"
        )
    if yes:
        manual.need_reason(action, reason)
    with context.open_session(ctx) as s:
        listed = bulk.candidates(s, action, which, force=asked.force)
        found = listed.rows
        keys = rows.bulk_keys(s.table.mapping.mapped_optional)  # the same with no row
        if not found:
            if not out.tabular:  # a machine format: its header (--yes: the outcomes'), no row
                shape = rows.MANUAL_KEYS if yes else keys
                terminal.emit(views.table([], [], keys=shape), out, fmt)
            _left_out(listed)
            terminal.say(f"no job matches the filter: nothing to {action}")
            context.exit_with(errors.EXIT_ERROR if listed.left_out else errors.EXIT_OK)
            return
        if save_plan is not None:
            with s.transaction(read_only=True):
                core.save_plan(save_plan, s.origin(), found)  # type: ignore[arg-type]
        elif yes:
            report = bulk.commit(
                s,
                action,
                listed.eligible,
                reason=reason,
                delay=asked.delay,
                spread=asked.spread,
                park=asked.park,
            )
    if yes:
        _left_out(listed)
        terminal.say(f"{len(found)} job(s) matched the filter, each written fenced as listed")
        terminal.report(report, out, fmt)  # exits with the worst outcome's code, if not 0
        context.exit_with(errors.EXIT_ERROR if listed.left_out else errors.EXIT_OK)
        return
    shown = rows.with_optional(rows.BULK_COLUMNS, found)
    terminal.emit(views.table(found, found, shown, views.BULK_VIEW, keys), out, fmt)
    _left_out(listed)
    more = f" (the first {which.limit}: --limit N for more)" if listed.at_limit else ""
    if save_plan is not None:
        terminal.say(
            f"{len(found)} job(s) match{more}; plan saved to {save_plan}: apply it with "
            f"jobctl {action} --plan {save_plan}" + (" --reason ..." if action != "requeue" else "")
        )
        context.exit_with(errors.EXIT_ERROR if listed.left_out else errors.EXIT_OK)
        return
    terminal.say(
        f"{len(found)} job(s) match{more}; nothing changed: --yes to {action} exactly these, "
        f"or --save-plan FILE to review them first"
    )
    context.exit_with(errors.EXIT_ERROR if listed.left_out else errors.EXIT_OK)


def _left_out(listed: bulk.Listed) -> None:
    """What a bulk write's filter left out, on stderr: the jobs the rules refuse, and each id
    two rows hold (exit 1: the picture is partial)."""
    context.say_if(listed.refused_line())
    for line in listed.left_out:
        terminal.say(line)


def by_hand(ctx: typer.Context, action: manual.Action, asked: ByHand) -> manual.Report:
    """``requeue`` / ``fail`` / ``cancel``: the rows of a saved plan, or the ids given."""
    from jobctl.ops import manual
    from jobctl.ops import review as core

    plan, reason, delay, expect_token = asked.plan, asked.reason, asked.delay, asked.expect_token
    force, spread, park = asked.force, asked.spread, asked.park
    confirm = None if asked.yes else terminal.confirm
    ids = _ids_or_plan(asked.job_ids, plan, expect_token)
    with context.open_session(ctx) as s:
        if plan is not None:
            return core.apply_plan(
                s,
                action,
                plan,
                reason=reason,
                delay=delay,
                force=force,
                confirm=confirm,
                spread=spread,
                park=park,
            )
        if action == "cancel":
            return manual.cancel(
                s, ids, reason=reason or "", park=park, expect_token=expect_token, confirm=confirm
            )
        if action == "requeue":
            return manual.requeue(
                s,
                ids,
                reason=reason,
                delay=delay,
                expect_token=expect_token,
                force=force,
                confirm=confirm,
                spread=spread,
            )
        return manual.fail(
            s, ids, reason=reason or "", expect_token=expect_token, force=force, confirm=confirm
        )


def _ids_or_plan(job_ids: list[str] | None, plan: Path | None, expect_token: object) -> list[str]:
    """The ids of requeue/fail: as given, or read from stdin for '-'; none with --plan."""
    from jobctl.ops import review as core

    if plan is not None:
        if job_ids or expect_token is not None:
            raise errors.UsageError("--plan applies exactly the plan's rows: no ids with it")
        return []
    if not job_ids:
        raise errors.UsageError("give job ids, - to read them from stdin, or --plan FILE")
    if job_ids == ["-"]:
        return core.read_ids(sys.stdin.read())
    if "-" in job_ids:
        raise errors.UsageError("- reads every id from stdin: give no other id with it")
    return job_ids


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
            report = manual.quarantine(
                s, min_reclaims, limit, reason=reason, confirm=None if yes else terminal.confirm
            )
    if not commit:
        terminal.emit(
            views.table(
                found, found, rows.PREVIEW_COLUMNS, views.PREVIEW_VIEW, rows.READ_BEFORE_KEYS
            ),
            out,
            fmt,
        )
        terminal.say(f"dry run: {len(found)} job(s) would switch to manual; nothing changed")
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
    from jobctl.ops import kind_policy, manual

    # no default direction: a forgotten --manual must not turn a manual job auto (the unsafe
    # way round), so a write without either is refused before anything is read
    wanted = None if auto is None else "auto" if auto else "manual"
    writes = not list_kinds and not remove
    if writes and wanted is None:
        raise errors.UsageError("say which policy: --auto or --manual (there is no default)")
    if list_kinds or kind is not None or queue is not None:
        if job_ids:
            raise errors.UsageError("give job ids or --kind/--queue/--list, not both")
        with context.open_session(ctx) as s:
            if list_kinds:
                found = kind_policy.listed(s)
                terminal.emit(views.table(found, found, keys=rows.KIND_POLICY_KEYS), out, fmt)
                return
            if kind is not None and queue is not None:
                raise errors.UsageError("give --kind or --queue, one at a time")
            dimension, value = ("kind", kind) if kind is not None else ("queue", queue or "")
            if remove:
                gone = kind_policy.remove(s, dimension, value, reason=reason)
                terminal.say(
                    f"policy of {dimension} {value} removed: its jobs' rows decide"
                    if gone
                    else f"no policy recorded for {dimension} {value}: nothing changed"
                )
                return
            assert wanted is not None  # refused above
            kind_policy.set_policy(s, dimension, value, wanted, reason=reason)
        terminal.say(
            f"{dimension} {value}: policy {wanted}, recorded"
            + (": reclaim treats its jobs as manual" if wanted == "manual" else "")
        )
        return
    if remove:
        raise errors.UsageError("--remove removes a policy per kind: give --kind or --queue")
    if not job_ids:
        raise errors.UsageError("give job ids, or --kind K / --queue Q, or --list")
    assert wanted is not None  # refused above
    with context.open_session(ctx) as s:
        report = manual.set_policies(
            s, job_ids, wanted, reason=reason, confirm=None if yes else terminal.confirm
        )
    terminal.report(report, out, fmt)
