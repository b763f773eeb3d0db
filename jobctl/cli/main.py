"""The typer app: the global options, the commands registered from the command table
(``cli/commands``, in the order ``jobctl --help`` lists them) and the entry point. Heavy
modules (psycopg, tabulate, rich's renderers) are imported inside the commands, so that
``jobctl --help`` and shell completion stay fast.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Annotated

import typer

from jobctl import __version__, db, errors
from jobctl.cli import bundles, commands, context, terminal
from jobctl.cli import options as opt
from jobctl.cli.click_api import LazyGroup
from jobctl.render import output

app = typer.Typer(
    name="jobctl",
    help="Triage stuck jobs in a PostgreSQL job queue: find expired leases, reclaim them "
    "(dry run first), and requeue or fail jobs by hand, every write fenced by attempt_token.",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)


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
    from jobctl import targets
    from jobctl.cli.click_api import ParameterSource

    run = context.invocation(ctx)
    run.debug, run.raw_dsn = debug, dsn
    if ctx.resilient_parsing:
        return
    given = {
        name: ctx.params[name]
        for name in ("table", "statement_timeout", "lock_timeout", "actor")
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    run.address = targets.address(
        # JOBCTL_TARGET is the default of --target only: --dsn or --all-targets override it;
        # the demo runs in its own database whatever it says
        target
        or (
            []
            if dsn or all_targets or ctx.invoked_subcommand == "demo"
            else targets.from_environment()
        ),
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


# ---------------------------------------------------------------- the commands
def _register(on: typer.Typer, table: Mapping[str, commands.Command | commands.Group]) -> None:
    """The commands of ``table`` (``cli/commands``) on ``on``, in its order, each under its
    panel (typer's ``rich_help_panel``, which ``LazyGroup`` lists as a heading): each function
    imported from its module (its module's heavy imports stay inside the function), its
    bundles of options expanded (``cli/bundles``)."""
    for name, listed in table.items():
        panel = listed.panel or None  # the heading of jobctl --help it is listed under
        if isinstance(listed, commands.Group):
            sub = typer.Typer(help=listed.help, no_args_is_help=True, rich_markup_mode=None)
            _register(sub, listed.commands)
            on.add_typer(sub, name=name, rich_help_panel=panel)
            continue
        function = getattr(importlib.import_module(listed.module), listed.function)
        on.command(name, short_help=listed.summary, rich_help_panel=panel)(
            bundles.expanded(function)
        )


_register(app, commands.COMMANDS)


# ---------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> int:
    """Run jobctl; every failure becomes one line on stderr and an exit code."""
    from jobctl.cli.click_api import (
        ClickException,
        MissingParameter,
        NoArgsIsHelpError,
        lazy_group,
    )

    if "_JOBCTL_COMPLETE" in os.environ:  # shell completion: registered late (startup time)
        from jobctl.cli import completion

        completion.register()
    run = context.Invocation()
    try:
        group = lazy_group(app)  # builds only the command that runs
        result = group.main(args=argv, prog_name="jobctl", standalone_mode=False, obj=run)
        return result if isinstance(result, int) else 0
    except NoArgsIsHelpError as exc:  # bare jobctl (or jobctl schema): the help, as help
        print(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        return 0
    except errors.Cancelled as exc:  # no or Ctrl-C at a prompt: not an error
        print(f"jobctl: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except errors.JobctlError as exc:
        _fail(run, exc, exc.message)
        return exc.exit_code
    except MissingParameter as exc:  # one line still, saying how the command is used
        usage = exc.ctx.get_usage().replace("Usage: ", "usage: ") if exc.ctx else ""
        _fail(run, exc, f"{exc.format_message()} {usage}".strip())
        return exc.exit_code
    except ClickException as exc:
        _fail(run, exc, exc.format_message())
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("jobctl: interrupted; what was not committed was rolled back", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return errors.EXIT_ERROR
    except Exception as exc:
        _fail(run, exc, f"internal error: {type(exc).__name__}: {exc}")
        return errors.EXIT_ERROR


def entry() -> int:
    """The ``jobctl`` program (its console script and ``python -m jobctl``): ``main``, then
    the cyclic garbage collector told to leave what the process made alone (``gc.freeze``).
    Its last full collection at exit cost 30-50 ms of a 0.4 s command, to free memory that
    the exit returns anyway; objects still go as their last reference does, and every file
    and connection is closed before ``main`` returns. Not in ``main``: the tests call it
    again and again in one process."""
    import gc

    code = main()
    gc.freeze()
    return code


def _fail(run: context.Invocation, exc: BaseException, message: str) -> None:
    dsn = run.raw_dsn or db.Settings().resolved_dsn() or None
    if run.debug:
        import traceback

        text = "".join(traceback.format_exception(exc))
        print(db.redact(text, dsn), file=sys.stderr, end="")
    line = " ".join(db.redact(message, dsn).split())
    width = terminal.columns(sys.stderr)  # wrapped at words, not mid-word by the terminal
    if width is not None:
        width -= len("jobctl: error: ")
    print(f"jobctl: error: {output.prose(line, width)}", file=sys.stderr)
