"""The ``top`` command: checks what it needs (Textual, a terminal, one database), opens the
command's session (``--allow-writes`` makes it a writer: refused on a standby before
anything shows) and runs the console until ``q``. Textual is imported here only when the
command runs, so ``jobctl --help`` and every other command never load it."""

from __future__ import annotations

import datetime as dt
import importlib.util
import sys
from typing import Annotated

import typer

from jobctl import errors
from jobctl.cli import context
from jobctl.cli import options as opt

INSTALL = "jobctl top needs Textual: pip install 'jobctl[tui]'"


def top(
    ctx: typer.Context,
    every: Annotated[
        dt.timedelta,
        opt.Duration("Refresh every (100ms at least).", show_default="2s", floor=opt.WATCH_FLOOR),
    ] = dt.timedelta(seconds=2),
    expiring_within: opt.Soon = dt.timedelta(seconds=30),
    limit: Annotated[
        int,
        typer.Option(min=1, max=10_000, metavar="N", help="Rows read per view (the rest counted)."),
    ] = 200,
    allow_writes: Annotated[
        bool,
        typer.Option(
            "--allow-writes", help="Let r/f requeue or fail (fenced, confirmed, audited)."
        ),
    ] = False,
) -> None:
    """An interactive console for the incident: stuck and awaiting-review jobs, refreshed
    live; move with the arrows or j/k, Enter for a job's history, space marks, / filters.
    Read-only unless --allow-writes: then r/f requeue or fail the marked jobs, each write
    confirmed and fenced on the row as the screen read it. Needs: pip install 'jobctl[tui]'.
    Example: jobctl top --allow-writes --actor alice
    """
    if importlib.util.find_spec("textual") is None:
        raise errors.UsageError(INSTALL)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise errors.UsageError(
            "jobctl top needs a terminal: for a script, jobctl stuck --watch or -o jsonl"
        )
    if context.across(ctx) is not None:
        raise errors.UsageError("jobctl top runs on one database: give one --target")
    from jobctl.cli.top.app import TopApp
    from jobctl.cli.top.data import Source
    from jobctl.ops import console

    context.warn_password_on_command_line(ctx)
    with context.open_session(ctx) as s:
        source = Source(
            s, context.standing(ctx), console.Ask(expiring_within, limit), writes=allow_writes
        )
        code = TopApp(source, every).run()
    raise typer.Exit(code or 0)
