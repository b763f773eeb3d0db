"""The typer app: each command parses its options, calls the core, and renders the result.

The workflows live in the core (``reclaim``, ``manual``, ``service``, ``watch``, ``triage``,
``schema``); this module prints, prompts and exits. Heavy modules (psycopg, tabulate, rich's
renderers) are imported inside the commands, so that ``jobctl --help`` and shell completion
stay fast.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jobctl import __version__, cli_fleet, cli_schema, db, errors, output, rows, terminal, views
from jobctl import options as opt

if TYPE_CHECKING:
    from jobctl.replica import Standing
    from jobctl.session import Session
    from jobctl.targets import Target

app = typer.Typer(
    name="jobctl",
    help="Triage stuck jobs in a PostgreSQL job queue: find expired leases, reclaim them "
    "(dry run first), and requeue or fail jobs by hand, every write fenced by attempt_token.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)
app.add_typer(cli_schema.app, name="schema")

_debug = False
_raw_dsn: str | None = None  # as typed, to redact it from any message
_standing: Standing | None = None  # the server of the command's session: primary or standby


@contextlib.contextmanager
def _session(ctx: typer.Context) -> Iterator[Session]:
    """The command's session (connection, settings, resolved jobs table). On a standby a
    write is refused before anything is asked, and a read says so on stderr (replica). A table
    jobctl does not serve (yet) is said to be so, with the next step (``unserved.explained``)."""
    from jobctl import replica, session, unserved

    global _standing
    from jobctl.targets import one_database

    settings = one_database(ctx.find_root().obj, ctx.command_path)
    with session.open(settings) as s, unserved.explained(s):
        _standing = replica.check(s.conn, ctx.info_name or "", ctx.params, say=terminal.say)
        yield s


def _across(ctx: typer.Context, *, watch: bool = False) -> Sequence[Target] | None:
    """The targets of a command run across several (``--all-targets``, or more than one
    ``--target``), else None: one database."""
    fleet = cli_fleet.several(ctx)
    if fleet is not None and watch:
        raise errors.UsageError("--watch shows one database: give one --target")
    return None if fleet is None else fleet.targets


def _policy(value: str | None) -> str | None:
    if value is not None and value not in ("auto", "manual"):
        raise errors.UsageError(f"--policy {value!r} must be auto or manual")
    return value


# ---------------------------------------------------------------- global options
def _version(value: bool) -> None:
    if value:
        print(f"jobctl {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    dsn: opt.Dsn = None,
    table: opt.Table = "jobs",
    target: opt.Targets = None,
    all_targets: opt.AllTargets = False,
    statement_timeout: opt.StatementTimeout = db.DEFAULT_STATEMENT_TIMEOUT,
    lock_timeout: opt.LockTimeout = db.DEFAULT_LOCK_TIMEOUT,
    actor: opt.Actor = None,
    debug: opt.Debug = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """jobctl: stuck-job triage for PostgreSQL job queues."""
    from typer._click.core import ParameterSource

    from jobctl import targets

    global _debug, _raw_dsn
    _debug, _raw_dsn = debug, dsn
    if ctx.resilient_parsing:
        return
    given = {
        name: ctx.params[name]
        for name in ("table", "statement_timeout", "lock_timeout", "actor")
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    ctx.obj = targets.address(
        target or targets.from_environment(),
        all_targets,
        dsn=dsn,
        one=db.Settings(
            dsn=dsn,
            table=table,
            statement_timeout=statement_timeout,
            lock_timeout=lock_timeout,
            actor=actor or db.default_actor(),
        ),
        overrides=given,
        warn=terminal.say,
    )


# ---------------------------------------------------------------- read path
@app.command()
def stuck(
    ctx: typer.Context,
    worker: opt.Worker = None,
    policy: opt.Policy = None,
    limit: Annotated[
        int, typer.Option(min=1, max=1_000_000, metavar="N", help="At most this many rows.")
    ] = 1000,
    grace: opt.Grace = dt.timedelta(0),
    expiring_within: Annotated[
        dt.timedelta | None, opt.Duration("Add live leases that expire within this.")
    ] = None,
    exit_code: Annotated[
        bool, typer.Option("--exit-code", help="Exit 4 when any are found.")
    ] = False,
    ready_after: Annotated[
        dt.timedelta,
        opt.Duration(
            "With nothing stuck, say so when ready jobs wait longer than this.",
            show_default="5m",
        ),
    ] = dt.timedelta(minutes=5),
    watch: opt.Watch = False,
    every: opt.Every = dt.timedelta(seconds=2),
    count: opt.Count = None,
    trust_replica: opt.TrustReplica = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Processing jobs whose lease expired (stuck, not merely slow), oldest expiry first.

    Each row says what reclaim would do to it (requeue or fail) and, when another session
    holds it locked, who. --expiring-within adds the live leases about to run out, with each
    worker's heartbeat lag. Example: jobctl stuck --expiring-within 30s --watch
    """
    from jobctl import replica, triage

    if expiring_within is not None and grace:
        raise errors.UsageError("--grace and --expiring-within look at opposite sides of now()")
    where = triage.ExpiredFilter(worker=worker, policy=_policy(policy), grace=grace)
    fleet = _across(ctx, watch=watch)
    if fleet is not None:
        cli_fleet.stuck(
            ctx,
            fleet,
            where,
            limit=limit,
            expiring_within=expiring_within,
            trust_replica=trust_replica,
            exit_code=exit_code,
            out=out,
            fmt=fmt,
        )
        return
    at_risk = expiring_within is not None
    columns = rows.AT_RISK_COLUMNS if at_risk else rows.STUCK_COLUMNS
    found = 0

    def rows_of(s: Session) -> Iterator[rows.LeaseRow]:
        nonlocal found
        if expiring_within is None:
            source: Iterator[rows.LeaseRow] = triage.stuck(s, where, limit)
        else:
            source = triage.at_risk(s, where, expiring_within, limit)
        for row in source:
            found += 1
            yield row

    with _session(ctx) as s:
        asked, where = where, replica.widen(where, _standing, trust=trust_replica)
        if watch:
            _watch(
                s,
                lambda: views.stuck(list(rows_of(s)), columns, at_risk=at_risk),
                every,
                count,
                out,
                fmt,
            )
            return
        with s.transaction(read_only=True):
            if out.tabular:  # a table needs every row for its widths
                doc = views.stuck(list(rows_of(s)), columns, at_risk=at_risk)
            else:
                streamed = rows_of(s)
                doc = views.table(streamed, streamed, columns)
            terminal.emit(replica.mark(doc, _standing), out, fmt)
            if where is not asked and expiring_within is None:
                _say(replica.held_back(replica.held_back_count(s, asked, _standing), _standing))
            waiting = None if found else triage.ready_waiting(s, ready_after)
    if waiting is not None:  # "my job is stuck" often means nobody claims it
        terminal.say(
            f"nothing stuck, but {waiting['ready']} job(s) ready to run have waited longer "
            f"than {opt.show_duration(ready_after)} (the oldest {waiting['oldest_ready_s']:.0f}s)"
            ": is any worker claiming? (jobctl summary shows the queue)"
        )
    if found and sys.stdout.isatty() and out.tabular:
        terminal.say(f"{found} job(s); preview the reclaim with: jobctl reclaim --dry-run")
    if exit_code and found:
        raise typer.Exit(errors.EXIT_FINDINGS)


@app.command()
def summary(
    ctx: typer.Context,
    expiring_within: opt.Soon = dt.timedelta(seconds=30),
    exact: Annotated[
        bool, typer.Option("--exact", help="Count finished jobs even on a large table.")
    ] = False,
    watch: opt.Watch = False,
    every: opt.Every = dt.timedelta(seconds=2),
    count: opt.Count = None,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Counts by status; processing split live / expiring soon / expired; workers.

    A deploy that killed a worker shows as one burst of expiries under its name; a dying
    worker shows as a growing heartbeat lag. On tables of a million rows or more, done and
    failed are estimated from statistics (marked) unless --exact.
    Example: jobctl summary --expiring-within 1m --watch
    """
    from jobctl import triage

    fleet = _across(ctx, watch=watch)
    if fleet is not None:
        cli_fleet.summary(
            ctx, fleet, expiring_within=expiring_within, exact=exact, out=out, fmt=fmt
        )
        return
    with _session(ctx) as s:
        if watch:
            _watch(
                s,
                lambda: views.summary(triage.summary(s, expiring_within, exact=exact)),
                every,
                count,
                out,
                fmt,
            )
            return
        with s.transaction(read_only=True):
            doc = views.summary(triage.summary(s, expiring_within, exact=exact))
    terminal.emit(_marked(doc), out, fmt)


def _marked(doc: output.Document) -> output.Document:
    """On a standby, JSON carries a ``replica`` field (docs/replicas.md)."""
    from jobctl import replica

    return replica.mark(doc, _standing)


def _say(line: str | None) -> None:
    if line:
        terminal.say(line)


def _watch(
    s: Session,
    produce: Callable[[], output.Document],
    every: dt.timedelta,
    count: int | None,
    out: output.Output,
    fmt: str | None,
) -> None:
    """--watch: refresh in place on a terminal, else one JSON line per refresh."""
    from jobctl import watch

    _warn_password_on_command_line()
    with terminal.live(out, fmt, every.total_seconds()) as show:
        watch.watch(s, produce, show, every=every, count=count)


@app.command()
def show(
    ctx: typer.Context,
    job_id: opt.JobId,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """One job: its row, its lease state (live, expired, none) and its latest events.

    Example: jobctl show 42 -o json
    """
    from jobctl import triage

    with _session(ctx) as s, s.transaction(read_only=True):
        job = triage.show(s, job_id)
    terminal.emit(_marked(views.show(job, job_id)), out, fmt)


@app.command()
def history(
    ctx: typer.Context,
    job_id: opt.JobId,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """A job's attempts (heartbeat history) and events (reclaim history), oldest first.

    Example: jobctl history 42
    """
    from jobctl import triage

    with _session(ctx) as s, s.transaction(read_only=True):
        result = triage.history(s, job_id)
    terminal.emit(_marked(views.history(result, job_id)), out, fmt)


@app.command(
    short_help="A job's story in plain sentences: claims, heartbeats, reclaims, who acted and why."
)
def explain(
    ctx: typer.Context,
    job_id: opt.JobId,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """A job's story in plain sentences: claims, heartbeats against the lease, reclaims, and
    who requeued or failed it and why. JSON gives the same facts as fields.

    Example: jobctl explain 42
    """
    from jobctl import story, triage

    with _session(ctx) as s, s.transaction(read_only=True):
        mapping = s.table.mapping
        result = story.explain(
            triage.history(s, job_id), parked=mapping.parked, failed=mapping.status("failed")
        )
    if out.tabular and fmt is None:
        width = terminal.width() if out is output.Output.table else None
        print("\n".join(output.prose(line, width) for line in result["story"]))
        return
    terminal.emit(_marked(views.explain(result)), out, fmt)


@app.command(
    short_help="Lease health as OpenMetrics text, for node_exporter, cron or a Nagios-style check."
)
def metrics(
    ctx: typer.Context,
    expiring_within: opt.Soon = dt.timedelta(seconds=30),
    reclaim_window: Annotated[
        dt.timedelta, opt.Duration("Window for recent reclaims.", show_default="5m")
    ] = dt.timedelta(minutes=5),
    max_stuck: Annotated[
        int | None, typer.Option(min=0, help="Exit 4 when more jobs than this are stuck.")
    ] = None,
    max_overdue: Annotated[
        dt.timedelta | None, opt.Duration("Exit 4 when a lease expired longer ago.")
    ] = None,
) -> None:
    """Lease health in the OpenMetrics text format, for the node_exporter textfile collector,
    a cron job or a Nagios-style check (--max-stuck, --max-overdue: exit 4 when breached).

    Example: jobctl metrics > /var/lib/node_exporter/textfile/jobctl.prom
    """
    from jobctl import metrics as core
    from jobctl import replica

    fleet = _across(ctx)
    if fleet is not None:
        cli_fleet.metrics(
            ctx,
            fleet,
            expiring_within=expiring_within,
            reclaim_window=reclaim_window,
            max_stuck=max_stuck,
            max_overdue=max_overdue,
        )
        return
    with _session(ctx) as s, s.transaction(read_only=True):
        figures = core.collect(s, expiring_within=expiring_within, reclaim_window=reclaim_window)
        figures |= replica.figures(_standing)
        table = s.table.qualified
    sys.stdout.write(core.openmetrics(figures, table))
    breached = core.breaches(figures, max_stuck=max_stuck, max_overdue=max_overdue)
    for line in breached:
        terminal.say(f"jobctl: CRITICAL: {line}")
    if breached:
        raise typer.Exit(errors.EXIT_FINDINGS)


# ---------------------------------------------------------------- reclaim
@app.command("reclaim")
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
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Reclaim expired leases: auto jobs with attempts left are requeued, the rest failed.

    The dry run (default) changes nothing and shows each decision; --commit applies exactly
    that decision in batches, each a short transaction fenced by the attempt token. A table
    shows the first 20 rows and any skipped; every row with -o jsonl, json or csv.
    Examples: jobctl reclaim --save-plan p.json; jobctl reclaim --commit --plan p.json
    """
    import dataclasses

    from jobctl import reclaim, replica, service, triage

    where = triage.ExpiredFilter(
        worker=worker, policy=_policy(policy), ids=job_ids or None, grace=grace
    )
    request = reclaim.Request(
        commit=commit,
        batch_size=batch_size,
        limit=limit,
        where=where,
        save_plan=save_plan,
        plan=plan,
        every=every,
        yes=yes,
    )
    request.check()
    fleet = _across(ctx)
    if fleet is not None:
        cli_fleet.reclaim(ctx, fleet, request, trust_replica=trust_replica, out=out, fmt=fmt)
        return
    if every is not None:
        _warn_password_on_command_line()
        service.run(
            ctx.find_root().obj,
            where,
            batch_size=batch_size,
            every=every,
            on_batch=lambda applied: terminal.emit_reclaimed(applied, out, fmt),
            log=terminal.say,
        )
        return
    with _session(ctx) as s:
        if not commit:  # on a standby, a lease expired within the lag may be live
            widened = replica.widen(where, _standing, trust=trust_replica)
            request = dataclasses.replace(request, where=widened)
        run = reclaim.start(s, request, terminal.confirm)
        run.batches = replica.reclaimed(run.batches, batch_size, s.settings.resolved_dsn())
        found, counts = terminal.drain(run, out, fmt)
        park_status = s.table.mapping.park_status
    terminal.emit_reclaim(found, sum(counts.values()), out, fmt)
    terminal.say(reclaim.summary_line(counts, commit, park_status=park_status))
    _say(replica.dry_run_note(_standing) if not commit else None)
    if save_plan is not None:
        terminal.say(
            f"plan saved to {save_plan}: apply it with jobctl reclaim --commit --plan {save_plan}"
        )


# ---------------------------------------------------------------- review
@app.command(
    short_help="Jobs waiting for a human: reclaim failed or parked them; longest waiting first."
)
def review(
    ctx: typer.Context,
    policy: opt.Policy = None,
    worker: Annotated[
        str | None, typer.Option(metavar="NAME", help="Only jobs this worker's lease left.")
    ] = None,
    since: Annotated[dt.timedelta | None, opt.Duration("Only jobs reclaimed within this.")] = None,
    older_than: Annotated[
        dt.timedelta | None, opt.Duration("Only jobs waiting for longer than this.")
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=1_000_000, metavar="N", help="At most this many rows.")
    ] = 1000,
    save_plan: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="Write the reviewed rows to FILE, for requeue/fail --plan."
        ),
    ] = None,
    exit_code: Annotated[
        bool, typer.Option("--exit-code", help="Exit 4 when any job awaits review.")
    ] = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Jobs waiting for a human: reclaim failed or parked them (manual policy, or attempts
    exhausted) and nobody has acted on them since. Longest waiting first.

    Decide in bulk, fenced on what you reviewed: jobctl review --save-plan p.json, then
    jobctl requeue --plan p.json (or fail --plan p.json --reason ...).
    Example: jobctl review --policy manual --since 2h
    """
    from jobctl import review as core

    where = core.ReviewFilter(
        policy=_policy(policy), worker=worker, since=since, older_than=older_than
    )
    fleet = _across(ctx)
    if fleet is not None:
        if save_plan is not None:
            raise errors.UsageError(
                "review --save-plan: requeue/fail --plan apply to one database: save a plan "
                "per --target"
            )
        cli_fleet.review(ctx, fleet, where, limit=limit, exit_code=exit_code, out=out, fmt=fmt)
        return
    with _session(ctx) as s, s.transaction(read_only=True):
        found = list(core.awaiting(s, where, limit))
        if save_plan is not None:
            core.save_plan(save_plan, s.origin(), found)
    terminal.emit(views.table(found, found, rows.REVIEW_COLUMNS, views.REVIEW_VIEW), out, fmt)
    if save_plan is not None:
        terminal.say(
            f"plan of {len(found)} job(s) saved to {save_plan}: apply it with "
            f"jobctl requeue --plan {save_plan} (or jobctl fail --plan {save_plan} --reason ...)"
        )
    elif found and sys.stdout.isatty() and out is output.Output.table:
        terminal.say(f"{len(found)} job(s) await review: jobctl requeue ID / jobctl fail ID")
    if exit_code and found:
        raise typer.Exit(errors.EXIT_FINDINGS)


# ---------------------------------------------------------------- across jobs
EVENTS_TABLE_ROWS = 1000  # a table on a terminal: the first ones (every row with -o jsonl)


@app.command(
    short_help="The history across jobs: transitions and every jobctl write, newest first."
)
def events(
    ctx: typer.Context,
    since: opt.Since = None,
    until: opt.Until = None,
    event: Annotated[
        list[str] | None,
        typer.Option(
            "--event", metavar="EVENT", help="Only this event, e.g. reclaimed (repeatable)."
        ),
    ] = None,
    actor: Annotated[str | None, typer.Option(metavar="NAME", help="Only this actor's.")] = None,
    worker: Annotated[
        str | None, typer.Option(metavar="NAME", help="Only events of this worker's attempts.")
    ] = None,
    job_ids: opt.OnlyIds = None,
    oldest_first: Annotated[
        bool, typer.Option("--oldest-first/--newest-first", help="Order by the event time.")
    ] = False,
    limit: opt.Limit = None,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """The history across jobs: every transition but claims and completions, and every
    jobctl write, newest first, streamed (-o jsonl/csv for millions of rows).

    --since/--until take a duration (2h: that long ago) or a timestamp.
    Example: jobctl events --since 2h --event reclaimed --event requeued
    """
    from jobctl import events as core

    with _session(ctx) as s:
        window = core.Window(
            since=core.bound(since) if since else None,
            until=core.bound(until) if until else None,
            events=event,
            actor=actor,
            worker=worker,
            ids=s.job_ids(job_ids) if job_ids else None,
        )
        with s.transaction(read_only=True):
            if out.tabular:  # a table needs every row for its widths: the first ones
                cap = EVENTS_TABLE_ROWS if limit is None else limit
                found = list(core.stream(s, window, oldest_first=oldest_first, limit=cap + 1))
                more = len(found) > cap
                found = found[:cap]
                doc = views.table(found, found, rows.JOB_EVENT_COLUMNS, views.JOB_EVENT_VIEW)
            else:
                streamed = core.stream(s, window, oldest_first=oldest_first, limit=limit)
                doc = views.table(streamed, streamed, rows.JOB_EVENT_COLUMNS)
                more = False
            terminal.emit(doc, out, fmt)
    if more:
        terminal.say(
            f"the first {len(found)} events shown: every one with -o jsonl, -o csv, or --limit N"
        )


@app.command(short_help="An incident on one page of Markdown, for the postmortem.")
def report(
    ctx: typer.Context,
    since: Annotated[
        str, typer.Option(metavar="WHEN", help="From this long ago (2h) or this time.")
    ] = "2h",
    until: opt.Until = None,
    out: opt.Out = output.Output.table,
) -> None:
    """An incident on one page of Markdown, for the postmortem: what expired (when, by
    worker), what reclaim did, what people did (who, what, why), what still waits for
    review, and the queue latency where the history can tell it. -o json gives the data.

    Example: jobctl report --since 2h > incident.md
    """
    from jobctl import events
    from jobctl import report as core

    window = events.Window(since=events.bound(since), until=events.bound(until) if until else None)
    with _session(ctx) as s, s.transaction(read_only=True):
        result = core.collect(s, window)
    if out in (output.Output.json, output.Output.jsonl):
        terminal.emit(output.Document(result, []), out, None)
    elif out.tabular:
        sys.stdout.write(core.markdown(result))
    else:
        raise errors.UsageError("report prints Markdown (-o table) or JSON (-o json, jsonl)")


# ---------------------------------------------------------------- operator writes
@app.command()
def requeue(
    ctx: typer.Context,
    job_ids: opt.JobIdsOrStdin = None,
    plan: opt.ReviewPlan = None,
    reason: opt.Reason = None,
    delay: Annotated[
        dt.timedelta, opt.Duration("Make it available after this long.", show_default="0s")
    ] = dt.timedelta(0),
    expect_token: opt.ExpectToken = None,
    force: opt.Force = False,
    yes: opt.Yes = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Requeue jobs by hand (status queued, lease and token cleared), fenced and audited.

    --plan FILE requeues the rows of a saved review plan, each only if unchanged since the
    review; - reads ids from stdin (one per line, or JSON lines with an id).
    Example: jobctl requeue 42 --reason "charge not captured, safe to retry" --yes
    """
    from jobctl import manual
    from jobctl import review as core

    confirm = None if yes else terminal.confirm
    ids = _ids_or_plan(job_ids, plan, expect_token)
    with _session(ctx) as s:
        if plan is not None:
            report = core.apply_plan(
                s, "requeue", plan, reason=reason, delay=delay, confirm=confirm
            )
        else:
            report = manual.requeue(
                s,
                ids,
                reason=reason,
                delay=delay,
                expect_token=expect_token,
                force=force,
                confirm=confirm,
            )
    terminal.report(report, out, fmt)


@app.command()
def fail(
    ctx: typer.Context,
    job_ids: opt.JobIdsOrStdin = None,
    plan: opt.ReviewPlan = None,
    reason: Annotated[str, typer.Option(help="Why (required): becomes last_error.")] = "",
    expect_token: opt.ExpectToken = None,
    force: opt.Force = False,
    yes: opt.Yes = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Fail jobs by hand (status failed, last_error = reason), fenced and audited.

    A job reclaim failed that awaits review may be failed for good. --plan FILE fails the
    rows of a saved review plan, each only if unchanged since the review; - reads ids from
    stdin (one per line, or JSON lines with an id).
    Example: jobctl fail 42 --reason "customer refunded by support" --yes
    """
    from jobctl import manual
    from jobctl import review as core

    confirm = None if yes else terminal.confirm
    ids = _ids_or_plan(job_ids, plan, expect_token)
    with _session(ctx) as s:
        if plan is not None:
            report = core.apply_plan(
                s, "fail", plan, reason=reason, delay=dt.timedelta(0), confirm=confirm
            )
        else:
            report = manual.fail(
                s, ids, reason=reason, expect_token=expect_token, force=force, confirm=confirm
            )
    terminal.report(report, out, fmt)


def _ids_or_plan(job_ids: list[str] | None, plan: Path | None, expect_token: object) -> list[str]:
    """The ids of requeue/fail: as given, or read from stdin for '-'; none with --plan."""
    from jobctl import review as core

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


@app.command()
def quarantine(
    ctx: typer.Context,
    min_reclaims: Annotated[
        int, typer.Option(min=1, help="Auto jobs reclaimed at least this many times.")
    ] = 3,
    commit: Annotated[
        bool, typer.Option("--commit/--dry-run", help="Apply, or only list (the default).")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, help="At most this many jobs.")] = 1000,
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
    from jobctl import manual

    with _session(ctx) as s:
        if not commit:
            found = [d.seen for d in manual.quarantine_candidates(s, min_reclaims, limit)]
        else:
            report = manual.quarantine(
                s, min_reclaims, limit, reason=reason, confirm=None if yes else terminal.confirm
            )
    if not commit:
        terminal.emit(views.table(found, found, rows.PREVIEW_COLUMNS, views.PREVIEW_VIEW), out, fmt)
        terminal.say(f"dry run: {len(found)} job(s) would switch to manual; nothing changed")
        return
    terminal.report(report, out, fmt)


@app.command()
def policy(
    ctx: typer.Context,
    job_ids: opt.JobIds,
    auto: Annotated[
        bool, typer.Option("--auto/--manual", help="The recovery policy to set.")
    ] = True,
    reason: opt.Reason = None,
    yes: opt.Yes = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Set jobs' recovery policy (auto: reclaim may requeue; manual: a human decides).

    Fenced and audited like every write. Example: jobctl policy 42 --auto --reason "fixed"
    """
    from jobctl import manual

    wanted = "auto" if auto else "manual"
    with _session(ctx) as s:
        report = manual.set_policies(
            s, job_ids, wanted, reason=reason, confirm=None if yes else terminal.confirm
        )
    terminal.report(report, out, fmt)


# ---------------------------------------------------------------- demo
@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="Leave the server running to explore.")] = False,
    stop: Annotated[bool, typer.Option(help="Stop a server left by --keep.")] = False,
) -> None:
    """Start an embedded PostgreSQL, stage a deploy that kills workers, then triage it.

    Needs the demo extra: pip install 'jobctl[demo]'. Example: jobctl demo --keep
    """
    from jobctl import demo as the_demo

    if stop:
        terminal.say(the_demo.stop_kept())
        return
    the_demo.run(keep=keep, say=terminal.say)


app.command(
    "targets", short_help="The named databases of the config file; --check connects to each."
)(cli_fleet.targets_command)


def _warn_password_on_command_line() -> None:
    """A command that runs for long (the service, a watch) keeps its command line, the
    password in --dsn with it, visible to every user of the machine (ps) all that time."""
    if db.holds_password(_raw_dsn):
        terminal.say(
            "jobctl: warning: the password in --dsn stays visible in the process list (ps) "
            "while this runs: set JOBCTL_DSN, or keep it in a password file (PGPASSFILE)"
        )


# ---------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> int:
    """Run jobctl; every failure becomes one line on stderr and an exit code."""
    from typer._click.exceptions import (  # typer >= 0.26 vendors click
        ClickException,
        MissingParameter,
        NoArgsIsHelpError,
    )

    if "_JOBCTL_COMPLETE" in os.environ:  # shell completion: typer's classes, registered late
        from typer import _completion_classes

        _completion_classes.completion_init()
    try:
        result = app(args=argv, prog_name="jobctl", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except NoArgsIsHelpError as exc:  # bare jobctl (or jobctl schema): the help, as help
        print(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        return 0
    except errors.Cancelled as exc:  # no or Ctrl-C at a prompt: not an error
        print(f"jobctl: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except errors.JobctlError as exc:
        _fail(exc, exc.message)
        return exc.exit_code
    except MissingParameter as exc:  # one line still, saying how the command is used
        usage = exc.ctx.get_usage().replace("Usage: ", "usage: ") if exc.ctx else ""
        _fail(exc, f"{exc.format_message()} {usage}".strip())
        return exc.exit_code
    except ClickException as exc:
        _fail(exc, exc.format_message())
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("jobctl: interrupted; what was not committed was rolled back", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return errors.EXIT_ERROR
    except Exception as exc:
        _fail(exc, f"internal error: {type(exc).__name__}: {exc}")
        return errors.EXIT_ERROR


def _fail(exc: BaseException, message: str) -> None:
    dsn = _raw_dsn or db.Settings().resolved_dsn() or None
    if _debug:
        import traceback

        text = "".join(traceback.format_exception(exc))
        print(db.redact(text, dsn), file=sys.stderr, end="")
    line = " ".join(db.redact(message, dsn).split())
    width = None
    if output.on_terminal(sys.stderr):  # wrapped at words, not mid-word by the terminal
        import shutil

        width = shutil.get_terminal_size().columns - len("jobctl: error: ")
    print(f"jobctl: error: {output.prose(line, width)}", file=sys.stderr)
