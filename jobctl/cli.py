"""The typer app: thin commands that parse, call the core, render. The only module that prints.

Heavy modules (psycopg, tabulate, rich's renderers) are imported inside the commands, so that
``jobctl --help`` and shell completion stay fast.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl import __version__, db, durations, errors, output

if TYPE_CHECKING:
    import psycopg

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


# ---------------------------------------------------------------- shared options
OutputOpt = Annotated[
    output.Output,
    typer.Option(
        "--output", "-o", help="table (rich on a terminal, plain otherwise), json, jsonl, csv, tsv."
    ),
]
FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="FORMAT",
        help="Any tabulate table format for -o table: plain, github, psql, ...",
    ),
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Confirm without a prompt.")]


def _complete_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Job ids from the database, for shell completion: nothing (and no error) without one."""
    try:
        from jobctl import queries

        root = ctx.find_root().params
        settings = db.Settings(dsn=root.get("dsn"), table=root.get("table") or "jobs")
        if not settings.resolved_dsn() and not os.environ.get("PGDATABASE"):
            return []
        with db.connect(settings) as conn:
            table = db.resolve_table(conn, settings.table)
            rows = conn.execute(
                queries.query("complete_ids", table.ident), {"prefix": incomplete}
            ).fetchall()
        return [r["id"] for r in rows]
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


def _duration(option: str, value: str | None) -> Any:
    return None if value is None else durations.parse(value, option=option)


def _settings(ctx: typer.Context) -> db.Settings:
    return ctx.find_root().obj


@contextlib.contextmanager
def _session(ctx: typer.Context) -> Iterator[tuple[psycopg.Connection[Any], db.JobsTable]]:
    """A connection and the resolved jobs table; database errors mapped to one line."""
    settings = _settings(ctx)
    with db.mapped_errors(settings.resolved_dsn()):
        conn = db.connect(settings)
        try:
            yield conn, db.resolve_table(conn, settings.table)
        finally:
            conn.close()


def _emit(doc: output.Document, out: output.Output, fmt: str | None) -> None:
    if fmt is not None:
        from tabulate import tabulate_formats

        if fmt not in tabulate_formats:
            known = ", ".join(sorted(tabulate_formats))
            raise errors.UsageError(f"--format {fmt!r} is not a tabulate format ({known})")
    output.render(doc, out, fmt, sys.stdout)


def _say(message: str) -> None:
    """A message for the operator: stderr, never mixed with data."""
    print(output.cell(message), file=sys.stderr)


def _confirm(question: str, yes: bool) -> None:
    """Ask on a terminal; off a terminal, --yes is required. Refusal changes nothing (exit 2)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise errors.Refused("not a terminal: pass --yes to confirm; nothing changed")
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
        str, typer.Option(metavar="DURATION", help="Per transaction.")
    ] = "30s",
    lock_timeout: Annotated[str, typer.Option(metavar="DURATION", help="Per transaction.")] = "2s",
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
        statement_timeout=durations.parse(statement_timeout, option="--statement-timeout"),
        lock_timeout=durations.parse(lock_timeout, option="--lock-timeout"),
        actor=actor or db.default_actor(),
    )


# ---------------------------------------------------------------- read path
STUCK_COLUMNS = [
    "id",
    "reserved_by",
    "recovery_policy",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "lease_expires_at",
    "lease_overdue_s",
    "heartbeat_age_s",
    "action",
]


WorkerOpt = Annotated[str | None, typer.Option(metavar="NAME", help="Only this worker's jobs.")]
PolicyOpt = Annotated[str | None, typer.Option(metavar="auto|manual", help="Only this policy.")]
GraceOpt = Annotated[
    str, typer.Option(metavar="DURATION", help="Only leases expired longer ago than this.")
]
SoonOpt = Annotated[str, typer.Option(metavar="DURATION", help="Window for 'expiring soon'.")]
WatchOpt = Annotated[bool, typer.Option("--watch", help="Refresh in place until Ctrl-C.")]
EveryOpt = Annotated[str, typer.Option("--every", metavar="DURATION", help="Watch refresh.")]
CountOpt = Annotated[
    int | None,
    typer.Option("--count", min=1, metavar="N", help="Stop watching after N refreshes."),
]


@app.command()
def stuck(
    ctx: typer.Context,
    worker: WorkerOpt = None,
    policy: PolicyOpt = None,
    limit: Annotated[
        int, typer.Option(min=1, max=1_000_000, metavar="N", help="At most this many rows.")
    ] = 1000,
    grace: GraceOpt = "0s",
    expiring_within: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help="Add live leases that expire within this."),
    ] = None,
    exit_code: Annotated[
        bool, typer.Option("--exit-code", help="Exit 4 when any are found.")
    ] = False,
    watch: WatchOpt = False,
    every: EveryOpt = "2s",
    count: CountOpt = None,
    out: OutputOpt = output.Output.table,
    fmt: FormatOpt = None,
) -> None:
    """Processing jobs whose lease expired (stuck, not merely slow), oldest expiry first.

    Each row says what reclaim would do to it (requeue or fail) and, when another session
    holds it locked, who. --expiring-within adds the live leases about to run out, with each
    worker's heartbeat lag. Example: jobctl stuck --expiring-within 30s --watch
    """
    from jobctl import reclaim, triage

    if expiring_within is not None and grace != "0s":
        raise errors.UsageError("--grace and --expiring-within look at opposite sides of now()")
    window = _duration("--expiring-within", expiring_within)
    where = triage.ExpiredFilter(
        worker=worker, policy=_policy(policy), grace=durations.parse(grace, option="--grace")
    )
    columns = (
        STUCK_COLUMNS
        if window is None
        else [*STUCK_COLUMNS, "lease_state", "worker_heartbeat_lag_s"]
    )
    found = 0

    def rows_of(conn: psycopg.Connection[Any], table: db.JobsTable) -> Iterator[dict[str, Any]]:
        nonlocal found
        source = (
            reclaim.preview(conn, table, where, limit)
            if window is None
            else (triage.note_locked(r) for r in triage.at_risk(conn, table, where, window, limit))
        )
        for row in source:
            found += 1
            row.pop("applied", None)
            yield row

    def document(rows: Any) -> output.Document:
        shown = columns + (["skipped"] if any(r["skipped"] for r in rows) else [])
        return output.Document(rows, [output.Section(None, rows, shown)])

    with _session(ctx) as (conn, table):
        if watch:
            _watch(
                conn,
                _settings(ctx),
                lambda: document(list(rows_of(conn, table))),
                every,
                count,
                out,
                fmt,
            )
            return
        with db.transaction(conn, _settings(ctx), read_only=True):
            rows: Any = rows_of(conn, table)
            if out is output.Output.table:  # a table needs every row for its widths
                _emit(document(list(rows)), out, fmt)
            else:
                _emit(output.Document(rows, [output.Section(None, rows, columns)]), out, fmt)
    if found and sys.stdout.isatty() and out is output.Output.table:
        _say(f"{found} job(s); preview the reclaim with: jobctl reclaim --dry-run")
    if exit_code and found:
        raise typer.Exit(errors.EXIT_FINDINGS)


@app.command()
def summary(
    ctx: typer.Context,
    expiring_within: SoonOpt = "30s",
    exact: Annotated[
        bool, typer.Option("--exact", help="Count finished jobs even on a large table.")
    ] = False,
    watch: WatchOpt = False,
    every: EveryOpt = "2s",
    count: CountOpt = None,
    out: OutputOpt = output.Output.table,
    fmt: FormatOpt = None,
) -> None:
    """Counts by status; processing split live / expiring soon / expired; workers.

    A deploy that killed a worker shows as one burst of expiries under its name; a dying
    worker shows as a growing heartbeat lag. On tables of a million rows or more, done and
    failed are estimated from statistics (marked) unless --exact.
    Example: jobctl summary --expiring-within 1m --watch
    """
    from jobctl import triage

    window = durations.parse(expiring_within, option="--expiring-within")

    def document() -> output.Document:
        result = triage.summary(conn, table, window, exact=exact)
        return output.Document(
            result,
            [
                output.Section(
                    "jobs by status",
                    [
                        {
                            "status": s,
                            "jobs": n,
                            "counted": "estimate" if s in result["estimated"] else "exact",
                        }
                        for s, n in result["status"].items()
                    ],
                ),
                output.Section("processing by lease", [result["processing"]]),
                output.Section("workers (most expired first)", result["workers"], SUMMARY_WORKERS),
            ],
        )

    with _session(ctx) as (conn, table):
        if watch:
            _watch(conn, _settings(ctx), document, every, count, out, fmt)
            return
        with db.transaction(conn, _settings(ctx), read_only=True):
            doc = document()
    _emit(doc, out, fmt)


SUMMARY_WORKERS = [
    "worker",
    "processing",
    "expired",
    "expired_manual",
    "expiring_soon",
    "first_expiry",
    "last_expiry",
    "last_seen_at",
    "heartbeat_lag_s",
]


def _watch(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    produce: Callable[[], output.Document],
    every: str,
    count: int | None,
    out: output.Output,
    fmt: str | None,
) -> None:
    """Refresh ``produce`` every ``every``: in place on a terminal, else one JSON line each.

    Each refresh is its own read-only transaction; Ctrl-C ends the watch with exit 0.
    """
    import time

    interval = durations.parse(every, option="--every").total_seconds()
    live = None
    if out is output.Output.table and fmt is None and output.use_rich(sys.stdout):
        from rich.live import Live

        live = Live(auto_refresh=False, redirect_stderr=False)
        live.start()
    refreshes = 0
    try:
        while True:
            with db.transaction(conn, settings, read_only=True):
                doc = produce()
                at = conn.execute("SELECT now() AS at").fetchone()["at"]
            if live is not None:
                live.update(
                    output.rich_group(
                        doc.sections, title=f"{at:%H:%M:%S} (every {interval:g}s, Ctrl-C to stop)"
                    ),
                    refresh=True,
                )
            else:
                print(output.to_json({"at": at, "data": doc.payload}), flush=True)
            refreshes += 1
            if count is not None and refreshes >= count:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
    finally:
        if live is not None:
            live.stop()


@app.command()
def show(
    ctx: typer.Context, job_id: IdArg, out: OutputOpt = output.Output.table, fmt: FormatOpt = None
) -> None:
    """One job: its row, its lease state (live, expired, none) and its latest events.

    Example: jobctl show 42 -o json
    """
    from jobctl import triage

    with _session(ctx) as (conn, table), db.transaction(conn, _settings(ctx), read_only=True):
        job = triage.show(conn, table, job_id)
    events = job.pop("events")
    _emit(
        output.Document(
            job | {"events": events},
            [
                output.Section(f"job {job_id}", output.key_values(job)),
                output.Section("latest events", events, EVENT_COLUMNS),
            ],
        ),
        out,
        fmt,
    )


EVENT_COLUMNS = ["at", "event", "from_status", "to_status", "attempt", "worker", "actor", "reason"]
ATTEMPT_COLUMNS = [
    "attempt",
    "worker",
    "claimed_at",
    "heartbeats",
    "late_heartbeats",  # the default history counts only heartbeats after half the lease
    "last_heartbeat_at",
    "max_heartbeat_gap_s",
    "ended_at",
    "outcome",
    "attempt_token",
]


@app.command()
def history(
    ctx: typer.Context, job_id: IdArg, out: OutputOpt = output.Output.table, fmt: FormatOpt = None
) -> None:
    """A job's attempts (heartbeat history) and events (reclaim history), oldest first.

    Example: jobctl history 42
    """
    from jobctl import triage

    with _session(ctx) as (conn, table), db.transaction(conn, _settings(ctx), read_only=True):
        result = triage.history(conn, table, job_id)
    job = result["job"]
    head = {
        k: job.get(k)
        for k in (
            "id",
            "status",
            "lease_state",
            "attempts",
            "max_attempts",
            "reclaim_count",
            "recovery_policy",
            "last_error",
        )
    }
    _emit(
        output.Document(
            result,
            [
                output.Section(f"job {job_id}", [head]),
                output.Section("attempts", result["attempts"], ATTEMPT_COLUMNS),
                output.Section("events", result["events"], EVENT_COLUMNS),
            ],
        ),
        out,
        fmt,
    )


@app.command()
def explain(
    ctx: typer.Context, job_id: IdArg, out: OutputOpt = output.Output.table, fmt: FormatOpt = None
) -> None:
    """A job's story in plain sentences: claims, heartbeats against the lease, reclaims, and
    who requeued or failed it and why. JSON gives the same facts as fields.

    Example: jobctl explain 42
    """
    from jobctl import story, triage

    with _session(ctx) as (conn, table), db.transaction(conn, _settings(ctx), read_only=True):
        result = story.explain(triage.history(conn, table, job_id))
    if out is output.Output.table and fmt is None:
        print("\n".join(output.cell(line) for line in result["story"]))
        return
    _emit(
        output.Document(
            result, [output.Section(None, [{"story": line} for line in result["story"]])]
        ),
        out,
        fmt,
    )


@app.command()
def metrics(
    ctx: typer.Context,
    expiring_within: SoonOpt = "30s",
    reclaim_window: Annotated[
        str, typer.Option(metavar="DURATION", help="Window for recent reclaims.")
    ] = "5m",
    max_stuck: Annotated[
        int | None, typer.Option(min=0, help="Exit 4 when more jobs than this are stuck.")
    ] = None,
    max_overdue: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help="Exit 4 when a lease expired longer ago."),
    ] = None,
) -> None:
    """Lease health in the OpenMetrics text format, for the node_exporter textfile collector,
    a cron job or a Nagios-style check (--max-stuck, --max-overdue: exit 4 when breached).

    Example: jobctl metrics > /var/lib/node_exporter/textfile/jobctl.prom
    """
    from jobctl import metrics as core

    overdue = _duration("--max-overdue", max_overdue)
    with _session(ctx) as (conn, table), db.transaction(conn, _settings(ctx), read_only=True):
        figures = core.collect(
            conn,
            table,
            expiring_within=durations.parse(expiring_within, option="--expiring-within"),
            reclaim_window=durations.parse(reclaim_window, option="--reclaim-window"),
        )
    sys.stdout.write(core.openmetrics(figures, table.qualified))
    breached = core.breaches(figures, max_stuck=max_stuck, max_overdue=overdue)
    for line in breached:
        _say(f"jobctl: CRITICAL: {line}")
    if breached:
        raise typer.Exit(errors.EXIT_FINDINGS)


# ---------------------------------------------------------------- reclaim
RECLAIM_COLUMNS = [
    "id",
    "reserved_by",
    "recovery_policy",
    "attempts",
    "max_attempts",
    "lease_overdue_s",
    "action",
    "applied",
    "skipped",
]


@app.command()
def reclaim(
    ctx: typer.Context,
    commit: Annotated[
        bool, typer.Option("--commit/--dry-run", help="Apply, or only preview (the default).")
    ] = False,
    yes: YesOpt = False,
    batch_size: Annotated[int, typer.Option(help="Rows per transaction (1-10000).")] = 50,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many rows.")] = None,
    worker: WorkerOpt = None,
    policy: PolicyOpt = None,
    job_ids: Annotated[
        list[int] | None,
        typer.Option("--id", min=1, max=MAX_ID, metavar="ID", help="Only this job (repeatable)."),
    ] = None,
    grace: GraceOpt = "0s",
    save_plan: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="With the dry run: write the reviewed rows to FILE."),
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="With --commit: apply only the rows of this saved plan."),
    ] = None,
    every: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Repeat every DURATION: the reclaimer service (needs --commit --yes).",
        ),
    ] = None,
    out: OutputOpt = output.Output.table,
    fmt: FormatOpt = None,
) -> None:
    """Reclaim expired leases: auto jobs with attempts left are requeued, the rest failed.

    The dry run (default) changes nothing and shows each decision; --commit applies exactly
    that decision in batches, each a short transaction fenced by the attempt token.
    Examples: jobctl reclaim --save-plan p.json; jobctl reclaim --commit --plan p.json
    """
    from jobctl import reclaim as core
    from jobctl import triage

    settings = _settings(ctx)
    if not core.MIN_BATCH <= batch_size <= core.MAX_BATCH:
        raise errors.UsageError(
            f"--batch-size must be between {core.MIN_BATCH} and {core.MAX_BATCH}, not {batch_size}"
        )
    if every is not None and not (commit and yes):
        raise errors.UsageError("--every runs the reclaimer service: it needs --commit --yes")
    if plan is not None and not commit:
        raise errors.UsageError("--plan applies a saved plan: it needs --commit")
    if save_plan is not None and commit:
        raise errors.UsageError("--save-plan saves a dry run: it cannot go with --commit")
    if plan is not None and (worker or policy or job_ids or every or grace != "0s"):
        raise errors.UsageError("--plan applies exactly the plan's rows: no filters with it")
    where = triage.ExpiredFilter(
        worker=worker,
        policy=_policy(policy),
        ids=job_ids,
        grace=durations.parse(grace, option="--grace"),
    )
    if every is not None:
        _serve(settings, where, batch_size, durations.parse(every, option="--every"), out, fmt)
        return

    streamed = commit and out is output.Output.jsonl  # committed batches print as they land
    with _session(ctx) as (conn, table):
        if not commit:
            rows = core.dry_run(conn, settings, table, where, limit)
            tally = _tally(rows)
            if save_plan is not None:
                core.save_plan(save_plan, db.where(conn, table), rows)
        elif plan is not None:
            planned = core.load_plan(plan, db.where(conn, table))
            _confirm(f"Apply plan {plan}: reclaim up to {len(planned)} job(s)?", yes)
            rows, tally = _run_batches(
                core.commit_plan(conn, settings, table, planned, batch_size=batch_size),
                len(planned),
                out,
                fmt,
            )
        else:
            total = None
            if not yes:
                preview = core.dry_run(conn, settings, table, where, limit)
                total = len(preview)
                requeue = sum(r["action"] == "requeue" for r in preview)
                _confirm(
                    f"Reclaim {total} expired job(s): {requeue} requeue, {total - requeue} fail?",
                    yes,
                )
            rows, tally = _run_batches(
                core.commit(conn, settings, table, where, batch_size=batch_size, limit=limit),
                total,
                out,
                fmt,
            )
    if not streamed:
        _emit(output.Document(rows, [output.Section(None, rows, RECLAIM_COLUMNS)]), out, fmt)
    nothing = "" if commit or sum(tally.values()) else "; nothing to reclaim"
    _say(_reclaim_summary(tally, commit) + nothing)
    if save_plan is not None:
        _say(f"plan saved to {save_plan}: apply it with jobctl reclaim --commit --plan {save_plan}")


def _run_batches(
    batches: Iterator[list[dict[str, Any]]], total: int | None, out: output.Output, fmt: str | None
) -> tuple[list[dict[str, Any]], collections.Counter[str]]:
    """Drain the batches, counting outcomes: jsonl prints each batch as it lands and keeps no
    rows (memory stays flat); other formats keep them for the end. A progress bar on a TTY."""
    rows: list[dict[str, Any]] = []
    tally: collections.Counter[str] = collections.Counter()
    progress = None
    if sys.stderr.isatty() and total and total > 1:
        from rich.console import Console
        from rich.progress import Progress

        progress = Progress(console=Console(stderr=True), transient=True)
        task = progress.add_task("reclaiming", total=total)
        progress.start()
    try:
        for batch in batches:
            tally += _tally(batch)
            if out is output.Output.jsonl:
                _emit(output.Document(batch, []), out, fmt)
            else:
                rows.extend(batch)
            if progress is not None:
                progress.update(task, advance=len(batch))
    finally:
        if progress is not None:
            progress.stop()
    return rows, tally


def _tally(rows: list[dict[str, Any]]) -> collections.Counter[str]:
    """requeue / fail / skipped counts of reclaim rows."""
    return collections.Counter("skipped" if r["skipped"] else r["action"] for r in rows)


def _reclaim_summary(tally: collections.Counter[str], committed: bool) -> str:
    requeue, fail, skipped = tally["requeue"], tally["fail"], tally["skipped"]
    if committed:
        return f"reclaimed: {requeue} requeued, {fail} failed, {skipped} skipped"
    return (
        f"dry run: {requeue} would be requeued, {fail} failed, {skipped} skipped; nothing changed"
    )


def _serve(
    settings: db.Settings,
    where: Any,
    batch_size: int,
    every: Any,
    out: output.Output,
    fmt: str | None,
) -> None:
    from jobctl import reclaim as core

    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        _say(f"reclaimer: {signal.Signals(signum).name}, stopping after the current batch")
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    _say(f"reclaimer: every {every.total_seconds():g}s, batch {batch_size}, table {settings.table}")
    for batch in core.serve(
        settings, where, batch_size=batch_size, every=every, stop=stop, log=_say
    ):
        applied = [r for r in batch if r["applied"]]
        if out is output.Output.jsonl or out is output.Output.json:
            _emit(output.Document(applied, []), output.Output.jsonl, fmt)
        else:
            _emit(
                output.Document(applied, [output.Section(None, applied, RECLAIM_COLUMNS)]), out, fmt
            )
        sys.stdout.flush()
        _say(_reclaim_summary(_tally(applied), True))
    _say("reclaimer: stopped")


# ---------------------------------------------------------------- manual actions
MANUAL_COLUMNS = [
    "id",
    "outcome",
    "detail",
    "status_before",
    "reserved_by",
    "lease_state",
    "attempt_token",
]


PREVIEW_COLUMNS = [
    "id",
    "status",
    "reserved_by",
    "attempts",
    "max_attempts",
    "reclaim_count",
    "recovery_policy",
    "lease_state",
    "attempt_token",
]


def _manual(
    ctx: typer.Context,
    action: str,
    job_ids: list[int],
    reason: str | None,
    delay: str,
    expect_token: str | None,
    force: bool,
    yes: bool,
    out: output.Output,
    fmt: str | None,
) -> None:
    from jobctl import manual

    token = None
    if expect_token is not None:
        try:
            token = uuid.UUID(expect_token)
        except ValueError:
            raise errors.UsageError(f"--expect-token {expect_token!r} is not a UUID") from None
    if expect_token is not None and len(job_ids) > 1:
        raise errors.UsageError("--expect-token names one attempt: give one job id with it")
    wait = durations.parse(delay, option="--delay")
    _decide_then_write(
        ctx,
        action,
        yes,
        out,
        fmt,
        decide=lambda conn, settings, table: [
            manual.decide(
                conn,
                settings,
                table,
                i,
                action,  # type: ignore[arg-type]
                force=force,
                expect_token=token,
            )
            for i in job_ids
        ],
        write=lambda conn, settings, table, d: manual.apply(
            conn, settings, table, d, action, reason=reason, delay=wait
        ),  # type: ignore[arg-type]
    )


def _decide_then_write(
    ctx: typer.Context,
    verb: str,
    yes: bool,
    out: output.Output,
    fmt: str | None,
    *,
    decide: Callable[..., list[Any]],
    write: Callable[..., Any],
) -> None:
    """Every operator write: read and decide each job, confirm, write each fenced, report.

    Each job is decided and reported on its own; the exit code is the worst outcome's.
    """
    from jobctl import manual

    settings = _settings(ctx)
    with _session(ctx) as (conn, table):
        decisions = decide(conn, settings, table)
        eligible = [d.seen for d in decisions if d.outcome is None and d.seen]
        if eligible and not yes:
            if sys.stdin.isatty():
                output.render(
                    output.Document(
                        None, [output.Section(f"about to {verb}", eligible, PREVIEW_COLUMNS)]
                    ),
                    output.Output.table,
                    None,
                    sys.stderr,
                )
            _confirm(f"{verb.capitalize()} {len(eligible)} job(s)?", yes)
        results = [write(conn, settings, table, d).result() for d in decisions]
    _emit(output.Document(results, [output.Section(None, results, MANUAL_COLUMNS)]), out, fmt)
    for result in results:  # errors also on stderr, where a redirected stdout hides them
        if result["outcome"] == "locked":
            _say(f"jobctl: job {result['id']}: {result['detail']}")
        elif result["outcome"] == "not_found":
            _say(f"jobctl: {result['detail']}")
    code = errors.worst_exit_code([manual.OUTCOME_EXIT[r["outcome"]] for r in results])
    if code:
        raise typer.Exit(code)


ReasonOpt = Annotated[str | None, typer.Option(help="Why: recorded in the history.")]
ExpectOpt = Annotated[
    str | None,
    typer.Option(
        help="Act only if the job's attempt token is this UUID (your copy, e.g. from stuck)."
    ),
]
ForceOpt = Annotated[bool, typer.Option(help="Act even on a live lease (its worker may run).")]


@app.command()
def requeue(
    ctx: typer.Context,
    job_ids: IdsArg,
    reason: ReasonOpt = None,
    delay: Annotated[
        str, typer.Option(metavar="DURATION", help="Make it available after this long.")
    ] = "0s",
    expect_token: ExpectOpt = None,
    force: ForceOpt = False,
    yes: YesOpt = False,
    out: OutputOpt = output.Output.table,
    fmt: FormatOpt = None,
) -> None:
    """Requeue jobs by hand (status queued, lease and token cleared), fenced and audited.

    Example: jobctl requeue 42 --reason "charge not captured, safe to retry" --yes
    """
    _manual(ctx, "requeue", job_ids, reason, delay, expect_token, force, yes, out, fmt)


@app.command()
def fail(
    ctx: typer.Context,
    job_ids: IdsArg,
    reason: Annotated[str, typer.Option(help="Why (required): becomes last_error.")] = "",
    expect_token: ExpectOpt = None,
    force: ForceOpt = False,
    yes: YesOpt = False,
    out: OutputOpt = output.Output.table,
    fmt: FormatOpt = None,
) -> None:
    """Fail jobs by hand (status failed, last_error = reason), fenced and audited.

    Example: jobctl fail 42 --reason "customer refunded by support" --yes
    """
    if not reason.strip():
        raise errors.UsageError("fail needs --reason: it becomes the job's last_error")
    _manual(ctx, "fail", job_ids, reason, "0s", expect_token, force, yes, out, fmt)


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
    reason: ReasonOpt = None,
    yes: YesOpt = False,
    out: OutputOpt = output.Output.table,
    fmt: FormatOpt = None,
) -> None:
    """Switch auto jobs that keep getting reclaimed to manual: stop retrying them blindly.

    A job that crashes its worker every time is reclaimed again and again; quarantine makes a
    human decide. Each switch is fenced and audited; undo with jobctl policy ID --auto.
    Example: jobctl quarantine --min-reclaims 3 --commit --reason "crash loop"
    """
    from jobctl import manual

    def candidates(conn: Any, settings: db.Settings, table: db.JobsTable) -> list[Any]:
        return manual.quarantine_candidates(conn, settings, table, min_reclaims, limit)

    if not commit:
        with _session(ctx) as (conn, table):
            rows = [d.seen for d in candidates(conn, _settings(ctx), table)]
        _emit(output.Document(rows, [output.Section(None, rows, PREVIEW_COLUMNS)]), out, fmt)
        _say(f"dry run: {len(rows)} job(s) would switch to manual; nothing changed")
        return
    _decide_then_write(
        ctx,
        "quarantine",
        yes,
        out,
        fmt,
        decide=candidates,
        write=lambda conn, settings, table, d: manual.set_policy(
            conn,
            settings,
            table,
            d,
            "manual",
            event="quarantined",
            reason=reason or f"reclaimed {d.seen['reclaim_count']} times",
        ),
    )


@app.command()
def policy(
    ctx: typer.Context,
    job_ids: IdsArg,
    auto: Annotated[
        bool, typer.Option("--auto/--manual", help="The recovery policy to set.")
    ] = True,
    reason: ReasonOpt = None,
    yes: YesOpt = False,
    out: OutputOpt = output.Output.table,
    fmt: FormatOpt = None,
) -> None:
    """Set jobs' recovery policy (auto: reclaim may requeue; manual: a human decides).

    Fenced and audited like every write. Example: jobctl policy 42 --auto --reason "fixed"
    """
    from jobctl import manual

    wanted = "auto" if auto else "manual"
    _decide_then_write(
        ctx,
        f"set policy {wanted} on",
        yes,
        out,
        fmt,
        decide=lambda conn, settings, table: [
            manual.decide_policy(conn, settings, table, i, wanted) for i in job_ids
        ],
        write=lambda conn, settings, table, d: manual.set_policy(
            conn, settings, table, d, wanted, event="policy_changed", reason=reason
        ),
    )


# ---------------------------------------------------------------- schema
@schema_app.command("apply")
def schema_apply(
    ctx: typer.Context,
    print_sql: Annotated[bool, typer.Option("--sql", help="Print the SQL instead.")] = False,
    create: Annotated[bool, typer.Option(help="Create a reference jobs table if none.")] = False,
    history_mode: Annotated[
        str | None,
        typer.Option(
            "--history",
            metavar="late|exact|audit",
            help="What the history records: late (the default on a first install; heartbeats "
            "counted when late), exact (every heartbeat, at a cost), audit (only jobctl's own "
            "writes). Default: keep the installed mode.",
        ),
    ] = None,
    no_worker_history: Annotated[
        bool, typer.Option("--no-worker-history", help="Same as --history audit.")
    ] = False,
    yes: YesOpt = False,
) -> None:
    """Add the seed's lease columns, checks and reclaim index, and jobctl's history.

    Idempotent: only what is missing is done, and the history is migrated in place. The
    index is built CONCURRENTLY on a table with rows. Example: jobctl schema apply --sql
    """
    from jobctl import history, schema

    if no_worker_history:
        if history_mode not in (None, "audit"):
            raise errors.UsageError("--no-worker-history and --history disagree")
        history_mode = "audit"
    if history_mode is not None and history_mode not in history.MODES:
        raise errors.UsageError(f"--history must be one of {', '.join(history.MODES)}")
    settings = _settings(ctx)
    with db.mapped_errors(settings.resolved_dsn()):
        conn = db.connect(settings)
        with conn:
            steps = schema.plan_apply(
                conn, settings.table, create=create, history_mode=history_mode
            )
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
    _confirm(question, yes)
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
    print_sql: Annotated[bool, typer.Option("--sql", help="Print the SQL instead.")] = False,
    yes: YesOpt = False,
) -> None:
    """Grant least privilege to existing roles: read-only, and operator (column UPDATE).

    Example: jobctl schema grants --readonly oncall_ro --operator oncall_rw --sql
    """
    from jobctl import schema

    if readonly is None and operator is None:
        raise errors.UsageError("give --readonly ROLE and/or --operator ROLE")
    settings = _settings(ctx)
    with db.mapped_errors(settings.resolved_dsn()):
        conn = db.connect(settings)
        with conn:
            steps = schema.plan_grants(conn, settings.table, readonly=readonly, operator=operator)
            _print_or_apply(
                conn, settings, steps, print_sql, yes, f"Apply {len(steps)} grant step(s)?"
            )


@schema_app.command("check")
def schema_check(
    ctx: typer.Context, out: OutputOpt = output.Output.table, fmt: FormatOpt = None
) -> None:
    """The seed's pre-flight checklist; exits 4 when a check fails.

    Example: jobctl schema check -o json
    """
    import dataclasses

    from jobctl import schema

    settings = _settings(ctx)
    with db.mapped_errors(settings.resolved_dsn()):
        conn = db.connect(settings)
        with conn, db.transaction(conn, settings, read_only=True):
            results = [dataclasses.asdict(c) for c in schema.check(conn, settings.table)]
    _emit(output.Document(results, [output.Section(None, results)]), out, fmt)
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
