"""``jobctl schema``: install, grant and check what jobctl needs on the jobs table.

Thin commands like the rest of the CLI: the steps are planned by ``schema`` and run by
``schema_steps``; ``schema_check`` checks. Registered by ``cli``, in the order ``jobctl schema
--help`` lists them.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl import db, errors, targets
from jobctl.cli import context, terminal
from jobctl.cli import mapping_options as mapping_opt
from jobctl.cli import options as opt
from jobctl.render import output, views
from jobctl.table.mapping import Given, TableMapping

if TYPE_CHECKING:
    import psycopg

    from jobctl.schema.steps import Step


def schema_apply(
    ctx: typer.Context,
    print_sql: opt.PrintSql = False,
    create: Annotated[bool, typer.Option(help="Create a reference jobs table if none.")] = False,
    lock_deadline: opt.LockDeadline = dt.timedelta(minutes=5),
    history_mode: opt.HistoryMode = None,
    no_worker_history: opt.NoWorkerHistory = False,
    columns: mapping_opt.ColumnMappings = None,
    statuses: mapping_opt.StatusMappings = None,
    park_status: mapping_opt.ParkStatus = None,
    units: mapping_opt.ColumnUnits = None,
    priority_order: mapping_opt.PriorityOrder = None,
    unlimited_max_attempts: mapping_opt.UnlimitedMaxAttempts = None,
    time_zone: mapping_opt.TimeZone = None,
    yes: opt.Yes = False,
) -> None:
    """Add the lease design's columns, checks and reclaim index, and jobctl's history.

    Idempotent: only what is missing is done, and the history is migrated in place. The
    index is built CONCURRENTLY on a table with rows. On a busy table, each locking step
    takes short tries until there is a gap, saying whom it waits for. --column, --status,
    --park-status, --column-unit, --priority-order, --unlimited-max-attempts and --time-zone
    merge into the recorded names (each one named replaces its part; DESIGN=DESIGN puts one
    back to the design's own); the rest are kept.
    Example: jobctl schema apply --sql > lease.sql
    """
    from jobctl.schema import apply as schema_apply
    from jobctl.schema import footprint

    history_mode = _history_mode(history_mode, no_worker_history)
    mapping, named = None, None
    parts: dict[str, Any] = {
        "columns": columns or (),
        "statuses": statuses or (),
        "park_status": park_status,
        "units": units or (),
        "priority_order": priority_order,
        "unlimited_max_attempts": unlimited_max_attempts,
        "time_zone": time_zone,
    }
    if any(v is not None and v != () for v in parts.values()):
        mapping = TableMapping.parse(**parts)
        named = Given.of(**parts)
    settings = targets.one_database(context.address(ctx), ctx.command_path)
    with db.connected(settings) as conn:
        with db.transaction(conn, settings, read_only=True):
            steps = schema_apply.plan_apply(
                conn,
                settings.table,
                create=create,
                history_mode=history_mode,
                mapping=mapping,
                named=named,
            )
            # the whole of what jobctl leaves, told before the steps that add what is missing
            whole = (
                footprint.of(conn, settings.table, history_mode=history_mode, mapping=mapping)
                if steps
                else None
            )
        _print_or_apply(
            conn,
            settings,
            steps,
            print_sql,
            yes,
            f"Apply {len(steps)} schema step(s) to {settings.table}?",
            lock_deadline,
            preface=whole.lines() if whole else [],
        )


def _history_mode(asked: str | None, no_worker_history: bool) -> str | None:
    """--history as asked (None: keep the installed mode), --no-worker-history its audit."""
    from jobctl.schema import history

    if no_worker_history:
        if asked not in (None, "audit"):
            raise errors.UsageError("--no-worker-history and --history disagree")
        asked = "audit"
    if asked is not None and asked not in history.MODES:
        raise errors.UsageError(f"--history must be one of {', '.join(history.MODES)}")
    return asked


def _print_or_apply(
    conn: psycopg.Connection[Any],
    settings: db.Settings,
    steps: list[Step],
    print_sql: bool,
    yes: bool,
    question: str,
    deadline: dt.timedelta = dt.timedelta(minutes=5),
    command: str = "schema apply",
    preface: list[str] | None = None,
) -> None:
    """--sql prints the steps for review; otherwise confirm, then apply them one by one,
    saying why a step waits (a spinner line on a terminal, else a line a second at most).
    ``preface``: what the steps amount to, told before them (as comments in --sql's script)."""
    from jobctl.contract import safe_text
    from jobctl.ops import lost_server, standby
    from jobctl.schema import steps as schema_steps

    if print_sql:
        # names from the catalog or the command line, on comment lines: each kept on its one
        # line, so that no text of theirs can end the comment and become a statement
        head = "".join(f"-- {safe_text.visible(line)}\n" for line in preface or ())
        sys.stdout.write(head + schema_steps.render_sql(conn, steps))
        return
    standing = standby.probe(conn)  # a standby: refused before the prompt
    if standing.standby:
        raise errors.Refused(standby.refusal(standing, command))
    if not yes and steps:
        # the steps it will take, one line each (--sql has their statements)
        terminal.say(
            "\n".join(
                [*(preface or ()), *(f"  {n}. {step.what}" for n, step in enumerate(steps, 1))]
            )
        )
    if not yes:
        terminal.confirm(question)
    progress = lost_server.Progress(
        f"of {len(steps)} step(s) applied and committed (each atomic)",
        "re-running the same command is safe: it plans only what is still missing",
    )
    with terminal.waiting("applying the schema steps") as (on_wait, on_done):

        def done(what: str) -> None:
            progress.done += 1
            on_done(what)

        try:
            with db.mapped_errors(settings.resolved_dsn()):
                schema_steps.apply(
                    conn, settings, steps, deadline=deadline, on_wait=on_wait, on_done=done
                )
        except errors.ConnectError as exc:
            raise progress.lost(exc) from None


def schema_remove(
    ctx: typer.Context,
    history_too: Annotated[
        bool,
        opt.history(
            "Also delete the table's history (after a confirmation naming its rows), "
            "and schema jobctl once no other table is in it. Default: keep it.",
            switch=True,
        ),
    ] = False,
    columns: Annotated[
        bool,
        typer.Option(
            "--columns",
            help="Also drop the lease columns, the jobctl_* columns, jobctl's checks and "
            "reclaim index. Refused while a row is processing with a live lease.",
        ),
    ] = False,
    print_sql: opt.PrintSql = False,
    lock_deadline: opt.LockDeadline = dt.timedelta(minutes=5),
    yes: opt.Yes = False,
) -> None:
    """Take jobctl off the table: the history trigger first, then on request the rest.

    Without options only the history trigger and its function go (the workers stop paying
    for them at once); --history deletes the history, --columns drops what apply added to
    the table. Idempotent; each locking step takes short tries, as apply's do.
    Example: jobctl schema remove --history --sql
    """
    from jobctl.ops import standby
    from jobctl.schema import remove

    settings = targets.one_database(context.address(ctx), ctx.command_path)
    with db.connected(settings) as conn:
        with db.transaction(conn, settings, read_only=True):
            removal = remove.plan(
                conn,
                settings.table,
                history_too=history_too,
                columns=columns,
                again=context.invocation(ctx).again(),
            )
        if not removal.steps:
            terminal.say(f"nothing left to remove from {removal.table}")
        elif print_sql:
            sys.stdout.write(remove.render_sql(conn, removal))
        else:
            # a standby: refused, no prompt
            standby.check(conn, "remove", writes=True, widened=False, say=terminal.say)
            if not yes:
                terminal.confirm(removal.question)
            with terminal.waiting("removing jobctl") as (on_wait, on_done):
                remove.apply(
                    conn,
                    settings,
                    removal,
                    deadline=lock_deadline,
                    on_wait=on_wait,
                    on_done=on_done,
                )
        for line in removal.kept:
            terminal.say(line)


def schema_grants(
    ctx: typer.Context,
    readonly: Annotated[
        str | None, typer.Option(metavar="ROLE", help="Role for the read-only commands.")
    ] = None,
    operator: Annotated[
        str | None,
        typer.Option(metavar="ROLE", help="Role that may also reclaim, requeue and fail."),
    ] = None,
    reclaimer: Annotated[
        str | None,
        typer.Option(
            metavar="ROLE",
            help="Role for the unattended reclaimer: reads, and reclaims expired leases "
            "through jobctl's function, nothing else.",
        ),
    ] = None,
    print_sql: opt.PrintSql = False,
    yes: opt.Yes = False,
) -> None:
    """Grant least privilege to existing roles: read-only, operator (column UPDATE), and
    reclaimer (the reclaim function only).

    Example: jobctl schema grants --readonly oncall_ro --operator oncall_rw --sql
    """
    from jobctl.schema import apply as schema_apply
    from jobctl.schema import check as schema_check

    if readonly is None and operator is None and reclaimer is None:
        raise errors.UsageError("give --readonly ROLE, --operator ROLE and/or --reclaimer ROLE")
    settings = targets.one_database(context.address(ctx), ctx.command_path)
    with db.connected(settings) as conn:
        with db.transaction(conn, settings, read_only=True):
            steps = schema_apply.plan_grants(
                conn, settings.table, readonly=readonly, operator=operator, reclaimer=reclaimer
            )
        _print_or_apply(
            conn,
            settings,
            steps,
            print_sql,
            yes,
            f"Apply {len(steps)} grant step(s)?",
            command="schema grants",
        )
        with db.transaction(conn, settings, read_only=True):  # the roles it leaves refused
            refused = schema_check.grants_row_security(
                conn,
                settings.table,
                [r for r in (readonly, operator, reclaimer) if r is not None],
            )
        context.say_if(refused)


def schema_check(
    ctx: typer.Context, out: opt.Out = output.Output.table, fmt: opt.Format = None
) -> None:
    """The lease design's pre-flight checklist; exits 4 when a check fails.

    Example: jobctl schema check -o json
    """
    import dataclasses

    from jobctl.ops import standby
    from jobctl.schema import check as schema_check

    settings = targets.one_database(context.address(ctx), ctx.command_path)
    with db.connected(settings) as conn:
        # on a standby, says so
        standby.check(conn, "check", writes=False, widened=False, say=terminal.say)
        with db.transaction(conn, settings, read_only=True):
            results = [dataclasses.asdict(c) for c in schema_check.check(conn, settings.table)]
    width = terminal.width()
    if out is output.Output.table and fmt is None and width is not None:
        # a checklist on a terminal: each detail whole, wrapped under its check, never cut
        from jobctl.render import screen

        items = [
            ("yes" if r["ok"] else "NO", output.cell(r["check"]), output.cell(r["detail"]))
            for r in results
        ]
        print("\n".join(screen.checklist(items, width)))
    else:
        terminal.emit(views.table(results, results, None, views.CHECK_VIEW), out, fmt)
    if not all(r["ok"] for r in results):
        raise typer.Exit(errors.EXIT_FINDINGS)


def schema_statements(
    ctx: typer.Context,
    prepare: Annotated[
        bool,
        typer.Option(
            "--prepare",
            help="Each as PREPARE name AS ...; (for psql: then EXECUTE claim(...)).",
        ),
    ] = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """The lease design's worker statements (claim, heartbeat, complete, fail) for the table
    as mapped: its names, status values and types, with $n placeholders, for a worker in any
    language (libpq, pgx, node-postgres, asyncpg, PDO; PREPARE ... AS works). The same SQL
    lease.Worker runs. -o json: a list of {name, sql, params}.

    Example: jobctl --table background_tasks schema statements > worker.sql
    """
    from jobctl.schema import statements

    settings = targets.one_database(context.address(ctx), ctx.command_path)
    with db.connected(settings) as conn:
        with db.transaction(conn, settings, read_only=True):
            # (it renders text: it plans no query on the table)
            table = db.resolve_table(conn, settings.table, reads_rows=False)
            rendered = statements.render(conn, table)
    if out.tabular and fmt is None:
        sys.stdout.write(statements.as_script(rendered, table.qualified, prepare=prepare))
        return
    found = statements.as_json(rendered)
    terminal.emit(views.table(found, found, ["name", "params", "sql"]), out, fmt)
