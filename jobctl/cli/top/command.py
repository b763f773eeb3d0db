"""The ``top`` command: checks what it needs (Textual, a terminal, one database), opens the
command's session (``--allow-writes`` makes it a writer: refused on a standby before
anything shows) and runs the console until ``q``. Textual is imported here only when the
command runs, so ``jobctl --help`` and every other command never load it."""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer

from jobctl import errors
from jobctl.cli import context, terminal
from jobctl.cli import options as opt

if TYPE_CHECKING:
    from jobctl import db
    from jobctl.cli.top.data import Reopen, Source
    from jobctl.ops import console

INSTALL = "jobctl top needs Textual: pip install 'jobctl[tui]'"


def top(
    ctx: typer.Context,
    every: Annotated[
        dt.timedelta, opt.every("Refresh every (100ms at least).", show_default="2s")
    ] = dt.timedelta(seconds=2),
    expiring_within: opt.Soon = None,
    limit: Annotated[
        int, opt.limit("Rows read per view (the rest counted).", most=opt.TOP_ROWS_MAX)
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
    Example: jobctl --actor alice top --allow-writes
    """
    import importlib.util  # (3 ms of imports: not at jobctl's start)

    if importlib.util.find_spec("textual") is None:
        raise errors.UsageError(INSTALL)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise errors.UsageError(
            "jobctl top needs a terminal: for a script, jobctl stuck --watch or -o jsonl"
        )
    from jobctl.cli.top.app import TopApp
    from jobctl.ops import console

    context.warn_password_on_command_line(ctx)
    ask = console.Ask(expiring_within, limit)
    with _sources(ctx, ask, allow_writes) as source:
        app = TopApp(source, every)
        app.run()
    raise typer.Exit(app.return_code or 0)  # q: 0, Ctrl-C: 130, a crash Textual showed: 1


@contextlib.contextmanager
def _sources(ctx: typer.Context, ask: console.Ask, writes: bool) -> Iterator[Source]:
    """The console's sessions: the command's one, or one per target (each opened as a
    command's is, a writer refused on a standby), all open until the console ends; each
    opened again the same way when its connection is lost."""
    from jobctl.cli.top.data import Site, Source
    from jobctl.ops import sessions
    from jobctl.targets import Fleet

    access = sessions.Access("top", writes=writes)

    def again(settings: db.Settings) -> Reopen:  # a lost session opened as the first was
        return lambda say: sessions.open(settings, access, say=say)

    match context.address(ctx):
        case Fleet(targets=chosen):
            with contextlib.ExitStack() as stack:
                sites = []
                for target in chosen:
                    target.check()
                    s, standing = stack.enter_context(
                        sessions.open(target.settings, access, say=terminal.say)
                    )
                    sites.append(Site(s, standing, target.name, reopen=again(s.settings)))
                source = Source(sites, ask, writes)
                stack.callback(source.close)
                yield source
        case _:
            with context.open_session(ctx) as s:
                site = Site(s, context.standing(ctx), reopen=again(s.settings))
                source = Source([site], ask, writes)
                try:
                    yield source
                finally:
                    source.close()
