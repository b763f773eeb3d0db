"""The typer app: each command parses its options, calls the core, and renders the result.

The workflows live in the core (``reclaim``, ``manual``, ``service``, ``watch``, ``triage``,
``schema``); this module prints, prompts and exits. Heavy modules (psycopg, tabulate, rich's
renderers) are imported inside the commands, so that ``jobctl --help`` and shell completion
stay fast.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl import __version__, db, errors, output, rows
from jobctl import options as opt

if TYPE_CHECKING:
    import psycopg

    from jobctl import manual, reclaim
    from jobctl.session import Session

app = typer.Typer(
    name="jobctl",
    help="Triage stuck jobs in a PostgreSQL job queue: find expired leases, reclaim them "
    "(dry run first), and requeue or fail jobs by hand, every write fenced by attempt_token.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
schema_app = typer.Typer(
    help="Install and check the lease columns, reclaim index and history.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(schema_app, name="schema")

_debug = False
_raw_dsn: str | None = None  # as typed, to redact it from any message
MAX_ID = 2**63 - 1


def _complete_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Job ids from the database, for shell completion: nothing (and no error) without one."""
    try:
        from jobctl import session

        root = ctx.find_root().params
        settings = db.Settings(dsn=root.get("dsn"), table=root.get("table") or "jobs")
        if not settings.resolved_dsn() and not os.environ.get("PGDATABASE"):
            return []
        with session.open(settings) as s:
            return [r["id"] for r in s.rows("complete_ids", {"prefix": incomplete})]
    except Exception:
        return []


IdArg = Annotated[
    int,
    typer.Argument(min=1, max=MAX_ID, help="Job id.", metavar="ID", autocompletion=_complete_ids),
]
IdsArg = Annotated[
    list[int],
    typer.Argument(
        min=1, max=MAX_ID, help="Job ids.", metavar="ID...", autocompletion=_complete_ids
    ),
]


# ---------------------------------------------------------------- talking to the operator
@contextlib.contextmanager
def _session(ctx: typer.Context) -> Iterator[Session]:
    """The command's session (connection, settings, resolved jobs table)."""
    from jobctl import session

    with session.open(ctx.find_root().obj) as s:
        yield s


def _emit(doc: output.Document, out: output.Output, fmt: str | None) -> None:
    if fmt is not None:
        from tabulate import tabulate_formats

        if fmt not in tabulate_formats:
            known = ", ".join(sorted(tabulate_formats))
            raise errors.UsageError(f"--format {fmt!r} is not a tabulate format ({known})")
    output.render(doc, out, fmt, sys.stdout)


def _table(payload: Any, section_rows: Sequence[Any], columns: list[str] | None) -> output.Document:
    """A document of one untitled table."""
    return output.Document(payload, [output.Section(None, section_rows, columns)])


def _say(message: str) -> None:
    """A message for the operator: stderr, never mixed with data."""
    print(output.cell(message), file=sys.stderr)


def _confirm(question: str, about: Sequence[Any] = (), title: str = "") -> None:
    """Ask on a terminal (showing the rows ``about`` to change); off a terminal, --yes is
    required. Refusal changes nothing (exit 2). The core's ``Confirm``."""
    if not sys.stdin.isatty():
        raise errors.Refused("not a terminal: pass --yes to confirm; nothing changed")
    if about:
        preview = output.Section(title, about, rows.PREVIEW_COLUMNS)
        output.render(output.Document(None, [preview]), output.Output.table, None, sys.stderr)
    if not typer.confirm(question, err=True):
        raise errors.Refused("not confirmed; nothing changed")


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
    dsn: Annotated[
        str | None,
        typer.Option(
            metavar="DSN",
            help="Connection string. Default: JOBCTL_DSN, DATABASE_URL, then libpq's PG* "
            "variables and service files.",
            show_default=False,
        ),
    ] = None,
    table: Annotated[
        str,
        typer.Option(
            envvar="JOBCTL_TABLE", metavar="TABLE", help="Jobs table, schema-qualified allowed."
        ),
    ] = "jobs",
    statement_timeout: Annotated[
        dt.timedelta, opt.Duration("Per transaction.", show_default="30s")
    ] = db.DEFAULT_STATEMENT_TIMEOUT,
    lock_timeout: Annotated[
        dt.timedelta, opt.Duration("Per transaction.", show_default="2s")
    ] = db.DEFAULT_LOCK_TIMEOUT,
    actor: Annotated[
        str | None,
        typer.Option(
            envvar="JOBCTL_ACTOR",
            help="Who acts, for the audit trail. Default: user@host.",
            show_default=False,
        ),
    ] = None,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show a traceback on errors (passwords redacted).")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """jobctl: stuck-job triage for PostgreSQL job queues."""
    global _debug, _raw_dsn
    _debug, _raw_dsn = debug, dsn
    if ctx.resilient_parsing:
        return
    ctx.obj = db.Settings(
        dsn=dsn,
        table=table,
        statement_timeout=statement_timeout,
        lock_timeout=lock_timeout,
        actor=actor or db.default_actor(),
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
    watch: opt.Watch = False,
    every: opt.Every = dt.timedelta(seconds=2),
    count: opt.Count = None,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Processing jobs whose lease expired (stuck, not merely slow), oldest expiry first.

    Each row says what reclaim would do to it (requeue or fail) and, when another session
    holds it locked, who. --expiring-within adds the live leases about to run out, with each
    worker's heartbeat lag. Example: jobctl stuck --expiring-within 30s --watch
    """
    from jobctl import triage

    if expiring_within is not None and grace:
        raise errors.UsageError("--grace and --expiring-within look at opposite sides of now()")
    where = triage.ExpiredFilter(worker=worker, policy=_policy(policy), grace=grace)
    columns = rows.STUCK_COLUMNS if expiring_within is None else rows.AT_RISK_COLUMNS
    found = 0

    def rows_of(s: Session) -> Iterator[Any]:
        nonlocal found
        if expiring_within is None:
            source: Iterator[Any] = triage.stuck(s, where, limit)
        else:
            source = triage.at_risk(s, where, expiring_within, limit)
        for row in source:
            found += 1
            yield row

    def document(found_rows: list[Any]) -> output.Document:
        shown = columns + (["skipped"] if any(r["skipped"] for r in found_rows) else [])
        return _table(found_rows, found_rows, shown)

    with _session(ctx) as s:
        if watch:
            _watch(s, lambda: document(list(rows_of(s))), every, count, out, fmt)
            return
        with s.transaction(read_only=True):
            if out is output.Output.table:  # a table needs every row for its widths
                _emit(document(list(rows_of(s))), out, fmt)
            else:
                streamed = rows_of(s)
                _emit(_table(streamed, streamed, columns), out, fmt)
    if found and sys.stdout.isatty() and out is output.Output.table:
        _say(f"{found} job(s); preview the reclaim with: jobctl reclaim --dry-run")
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

    def document(s: Session) -> output.Document:
        result = triage.summary(s, expiring_within, exact=exact)
        by_status = [
            {
                "status": status,
                "jobs": n,
                "counted": "estimate" if status in result["estimated"] else "exact",
            }
            for status, n in result["status"].items()
        ]
        return output.Document(
            result,
            [
                output.Section("jobs by status", by_status),
                output.Section("processing by lease", [result["processing"]]),
                output.Section(
                    "workers (most expired first)",
                    result["workers"],
                    rows.SUMMARY_WORKER_COLUMNS,
                ),
            ],
        )

    with _session(ctx) as s:
        if watch:
            _watch(s, lambda: document(s), every, count, out, fmt)
            return
        with s.transaction(read_only=True):
            doc = document(s)
    _emit(doc, out, fmt)


def _watch(
    s: Session,
    produce: Any,
    every: dt.timedelta,
    count: int | None,
    out: output.Output,
    fmt: str | None,
) -> None:
    """--watch: in place on a terminal (rich Live), else one JSON line per refresh."""
    from jobctl import watch

    if not (out is output.Output.table and fmt is None and output.use_rich(sys.stdout)):
        watch.watch(
            s,
            produce,
            lambda at, doc: print(output.to_json({"at": at, "data": doc.payload}), flush=True),
            every=every,
            count=count,
        )
        return
    from rich.live import Live

    title = f"(every {every.total_seconds():g}s, Ctrl-C to stop)"
    with Live(auto_refresh=False, redirect_stderr=False) as live:
        watch.watch(
            s,
            produce,
            lambda at, doc: live.update(
                output.rich_group(doc.sections, title=f"{at:%H:%M:%S} {title}"), refresh=True
            ),
            every=every,
            count=count,
        )


@app.command()
def show(
    ctx: typer.Context, job_id: IdArg, out: opt.Out = output.Output.table, fmt: opt.Format = None
) -> None:
    """One job: its row, its lease state (live, expired, none) and its latest events.

    Example: jobctl show 42 -o json
    """
    from jobctl import triage

    with _session(ctx) as s, s.transaction(read_only=True):
        job = triage.show(s, job_id)
    events = job.pop("events")
    sections = [
        output.Section(f"job {job_id}", output.key_values(job)),
        output.Section("latest events", events, rows.EVENT_COLUMNS),
    ]
    _emit(output.Document(job | {"events": events}, sections), out, fmt)


@app.command()
def history(
    ctx: typer.Context, job_id: IdArg, out: opt.Out = output.Output.table, fmt: opt.Format = None
) -> None:
    """A job's attempts (heartbeat history) and events (reclaim history), oldest first.

    Example: jobctl history 42
    """
    from jobctl import triage

    with _session(ctx) as s, s.transaction(read_only=True):
        result = triage.history(s, job_id)
    head = {k: result["job"].get(k) for k in rows.HISTORY_HEAD_COLUMNS}
    sections = [
        output.Section(f"job {job_id}", [head]),
        output.Section("attempts", result["attempts"], rows.ATTEMPT_COLUMNS),
        output.Section("events", result["events"], rows.EVENT_COLUMNS),
    ]
    _emit(output.Document(result, sections), out, fmt)


@app.command()
def explain(
    ctx: typer.Context, job_id: IdArg, out: opt.Out = output.Output.table, fmt: opt.Format = None
) -> None:
    """A job's story in plain sentences: claims, heartbeats against the lease, reclaims, and
    who requeued or failed it and why. JSON gives the same facts as fields.

    Example: jobctl explain 42
    """
    from jobctl import story, triage

    with _session(ctx) as s, s.transaction(read_only=True):
        result = story.explain(triage.history(s, job_id))
    if out is output.Output.table and fmt is None:
        print("\n".join(output.cell(line) for line in result["story"]))
        return
    _emit(_table(result, [{"story": line} for line in result["story"]], None), out, fmt)


@app.command()
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

    with _session(ctx) as s, s.transaction(read_only=True):
        figures = core.collect(s, expiring_within=expiring_within, reclaim_window=reclaim_window)
        table = s.table.qualified
    sys.stdout.write(core.openmetrics(figures, table))
    breached = core.breaches(figures, max_stuck=max_stuck, max_overdue=max_overdue)
    for line in breached:
        _say(f"jobctl: CRITICAL: {line}")
    if breached:
        raise typer.Exit(errors.EXIT_FINDINGS)


# ---------------------------------------------------------------- reclaim
@app.command("reclaim")
def reclaim_command(
    ctx: typer.Context,
    commit: Annotated[
        bool, typer.Option("--commit/--dry-run", help="Apply, or only preview (the default).")
    ] = False,
    yes: opt.Yes = False,
    batch_size: Annotated[int, typer.Option(help="Rows per transaction (1-10000).")] = 50,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many rows.")] = None,
    worker: opt.Worker = None,
    policy: opt.Policy = None,
    job_ids: Annotated[
        list[int] | None,
        typer.Option("--id", min=1, max=MAX_ID, metavar="ID", help="Only this job (repeatable)."),
    ] = None,
    grace: opt.Grace = dt.timedelta(0),
    save_plan: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="With the dry run: write the reviewed rows to FILE."),
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="With --commit: apply only the rows of this saved plan."),
    ] = None,
    every: Annotated[
        dt.timedelta | None,
        opt.Duration("Repeat every DURATION: the reclaimer service (needs --commit --yes)."),
    ] = None,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Reclaim expired leases: auto jobs with attempts left are requeued, the rest failed.

    The dry run (default) changes nothing and shows each decision; --commit applies exactly
    that decision in batches, each a short transaction fenced by the attempt token.
    Examples: jobctl reclaim --save-plan p.json; jobctl reclaim --commit --plan p.json
    """
    from jobctl import reclaim, service, triage

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
    if every is not None:
        service.run(
            ctx.find_root().obj,
            where,
            batch_size=batch_size,
            every=every,
            on_batch=lambda applied: _emit_reclaimed(applied, out, fmt),
            log=_say,
        )
        return
    with _session(ctx) as s:
        run = reclaim.start(s, request, _confirm)
        found, counts = _drain(run, out, fmt)
    if not (commit and out is output.Output.jsonl):  # jsonl printed each batch as it landed
        _emit(_table(found, found, rows.RECLAIM_COLUMNS), out, fmt)
    _say(reclaim.summary_line(counts, commit))
    if save_plan is not None:
        _say(f"plan saved to {save_plan}: apply it with jobctl reclaim --commit --plan {save_plan}")


def _drain(
    run: reclaim.Run, out: output.Output, fmt: str | None
) -> tuple[list[rows.ReclaimRow], collections.Counter[str]]:
    """Drain a reclaim's batches, counting outcomes: jsonl prints each batch as it lands and
    keeps no rows (memory stays flat); other formats keep them for the end. A progress bar
    on a terminal."""
    from jobctl import reclaim

    kept: list[rows.ReclaimRow] = []
    counts: collections.Counter[str] = collections.Counter()
    progress = None
    if sys.stderr.isatty() and run.total and run.total > 1:
        from rich.console import Console
        from rich.progress import Progress

        progress = Progress(console=Console(stderr=True), transient=True)
        task = progress.add_task("reclaiming", total=run.total)
        progress.start()
    try:
        for batch in run.batches:
            counts += reclaim.tally(batch)
            if out is output.Output.jsonl:
                _emit(output.Document(batch, []), out, fmt)
            else:
                kept.extend(batch)
            if progress is not None:
                progress.update(task, advance=len(batch))
    finally:
        if progress is not None:
            progress.stop()
    return kept, counts


def _emit_reclaimed(applied: list[rows.ReclaimRow], out: output.Output, fmt: str | None) -> None:
    """One batch of the reclaimer service: JSON lines, or a table per batch."""
    if out in (output.Output.jsonl, output.Output.json):
        _emit(output.Document(applied, []), output.Output.jsonl, fmt)
    else:
        _emit(_table(applied, applied, rows.RECLAIM_COLUMNS), out, fmt)
    sys.stdout.flush()


# ---------------------------------------------------------------- operator writes
def _report(report: manual.Report, out: output.Output, fmt: str | None) -> None:
    """Print an operator write's outcomes; problems also on stderr; exit with the worst."""
    _emit(_table(report.results, report.results, rows.MANUAL_COLUMNS), out, fmt)
    for line in report.problems():
        _say(line)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _token(expect_token: str | None) -> uuid.UUID | None:
    if expect_token is None:
        return None
    try:
        return uuid.UUID(expect_token)
    except ValueError:
        raise errors.UsageError(f"--expect-token {expect_token!r} is not a UUID") from None


@app.command()
def requeue(
    ctx: typer.Context,
    job_ids: IdsArg,
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

    Example: jobctl requeue 42 --reason "charge not captured, safe to retry" --yes
    """
    from jobctl import manual

    token = _token(expect_token)
    with _session(ctx) as s:
        report = manual.requeue(
            s,
            job_ids,
            reason=reason,
            delay=delay,
            expect_token=token,
            force=force,
            confirm=None if yes else _confirm,
        )
    _report(report, out, fmt)


@app.command()
def fail(
    ctx: typer.Context,
    job_ids: IdsArg,
    reason: Annotated[str, typer.Option(help="Why (required): becomes last_error.")] = "",
    expect_token: opt.ExpectToken = None,
    force: opt.Force = False,
    yes: opt.Yes = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """Fail jobs by hand (status failed, last_error = reason), fenced and audited.

    Example: jobctl fail 42 --reason "customer refunded by support" --yes
    """
    from jobctl import manual

    token = _token(expect_token)
    with _session(ctx) as s:
        report = manual.fail(
            s,
            job_ids,
            reason=reason,
            expect_token=token,
            force=force,
            confirm=None if yes else _confirm,
        )
    _report(report, out, fmt)


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
                s, min_reclaims, limit, reason=reason, confirm=None if yes else _confirm
            )
    if not commit:
        _emit(_table(found, found, rows.PREVIEW_COLUMNS), out, fmt)
        _say(f"dry run: {len(found)} job(s) would switch to manual; nothing changed")
        return
    _report(report, out, fmt)


@app.command()
def policy(
    ctx: typer.Context,
    job_ids: IdsArg,
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
            s, job_ids, wanted, reason=reason, confirm=None if yes else _confirm
        )
    _report(report, out, fmt)


# ---------------------------------------------------------------- schema
@schema_app.command("apply")
def schema_apply(
    ctx: typer.Context,
    print_sql: opt.PrintSql = False,
    create: Annotated[bool, typer.Option(help="Create a reference jobs table if none.")] = False,
    yes: opt.Yes = False,
) -> None:
    """Add the lease design's columns, checks and reclaim index, and jobctl's history.

    Idempotent: only what is missing is done. The index is built CONCURRENTLY on a table
    with rows. Example: jobctl schema apply --sql > lease.sql
    """
    from jobctl import schema

    settings = ctx.find_root().obj
    with db.connected(settings) as conn:
        steps = schema.plan_apply(conn, settings.table, create=create)
        _print_or_apply(
            conn,
            settings,
            steps,
            print_sql,
            yes,
            f"Apply {len(steps)} schema step(s) to {settings.table}?",
        )


def _print_or_apply(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    steps: list[Any],
    print_sql: bool,
    yes: bool,
    question: str,
) -> None:
    """--sql prints the steps for review; otherwise confirm, then apply them one by one."""
    from jobctl import schema

    if print_sql:
        sys.stdout.write(schema.render_sql(conn, steps))
        return
    if not yes:
        _confirm(question)
    for what in schema.apply(conn, settings, steps):
        _say(f"done: {what}")


@schema_app.command("grants")
def schema_grants(
    ctx: typer.Context,
    readonly: Annotated[
        str | None, typer.Option(metavar="ROLE", help="Role for the read-only commands.")
    ] = None,
    operator: Annotated[
        str | None,
        typer.Option(metavar="ROLE", help="Role that may also reclaim, requeue and fail."),
    ] = None,
    print_sql: opt.PrintSql = False,
    yes: opt.Yes = False,
) -> None:
    """Grant least privilege to existing roles: read-only, and operator (column UPDATE).

    Example: jobctl schema grants --readonly oncall_ro --operator oncall_rw --sql
    """
    from jobctl import schema

    if readonly is None and operator is None:
        raise errors.UsageError("give --readonly ROLE and/or --operator ROLE")
    settings = ctx.find_root().obj
    with db.connected(settings) as conn:
        steps = schema.plan_grants(conn, settings.table, readonly=readonly, operator=operator)
        _print_or_apply(conn, settings, steps, print_sql, yes, f"Apply {len(steps)} grant step(s)?")


@schema_app.command("check")
def schema_check(
    ctx: typer.Context, out: opt.Out = output.Output.table, fmt: opt.Format = None
) -> None:
    """The lease design's pre-flight checklist; exits 4 when a check fails.

    Example: jobctl schema check -o json
    """
    import dataclasses

    from jobctl import schema

    settings = ctx.find_root().obj
    with db.connected(settings) as conn, db.transaction(conn, settings, read_only=True):
        results = [dataclasses.asdict(c) for c in schema.check(conn, settings.table)]
    _emit(_table(results, results, None), out, fmt)
    if not all(r["ok"] for r in results):
        raise typer.Exit(errors.EXIT_FINDINGS)


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
        _say(the_demo.stop_kept())
        return
    the_demo.run(keep=keep, say=_say)


# ---------------------------------------------------------------- entry point
def _click_exception() -> type[Exception]:
    try:
        from typer._click.exceptions import ClickException
    except ImportError:  # typer before 0.26 depends on click itself
        from click.exceptions import ClickException  # type: ignore[no-redef]
    return ClickException


def main(argv: list[str] | None = None) -> int:
    """Run jobctl; every failure becomes one line on stderr and an exit code."""
    click_error = _click_exception()
    if "_JOBCTL_COMPLETE" in os.environ:  # shell completion: typer's classes, registered late
        from typer import completion

        completion.completion_init()
    try:
        result = app(args=argv, prog_name="jobctl", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except errors.JobctlError as exc:
        _fail(exc, exc.message)
        return exc.exit_code
    except click_error as exc:
        _fail(exc, exc.format_message())  # type: ignore[attr-defined]
        return exc.exit_code  # type: ignore[attr-defined]
    except (typer.Abort, KeyboardInterrupt) as exc:
        _fail(exc, "interrupted; the current transaction was rolled back")
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
    print(f"jobctl: error: {output.cell(line)}", file=sys.stderr)
