"""The typer app: the global options, the commands registered from the command table
(``cli/commands``, in the order ``jobctl --help`` lists them) and the entry point. Heavy
modules (psycopg, tabulate, rich's renderers) are imported inside the commands, so that
``jobctl --help`` and shell completion stay fast.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import typer

from jobctl import __version__, db, errors
from jobctl.cli import bundles, click_api, commands, context, terminal
from jobctl.cli import options as opt
from jobctl.render import output


# ---------------------------------------------------------------- the commands
def _built(name: str, listed: commands.Command | commands.Group) -> Any:
    """The click command typer makes of the table's ``listed`` (a group: of its commands),
    through its public API: a one-command app, its function imported from its module (its
    module's heavy imports stay inside the function), its bundles of options expanded
    (``cli/bundles``), listed under its panel (typer's ``rich_help_panel``)."""
    panel = listed.panel or None  # the heading of jobctl --help it is listed under
    one = _typer()
    if isinstance(listed, commands.Group):  # an app of one group: the group, as typer adds it
        group = _typer(help=listed.help)
        group.callback(invoke_without_command=True)(_group_help)
        for sub, entry in listed.commands.items():
            _add(group, sub, entry, None)
        one.add_typer(group, name=name, rich_help_panel=panel)
        return typer.main.get_command(one).get_command(None, name)  # type: ignore[attr-defined]
    _add(one, name, listed, panel)
    return typer.main.get_command(one)


def _typer(**settings: Any) -> typer.Typer:
    return typer.Typer(
        add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False, **settings
    )


def _add(on: typer.Typer, name: str, listed: commands.Command, panel: str | None) -> None:
    function = getattr(importlib.import_module(listed.module), listed.function)
    on.command(name, short_help=listed.summary, rich_help_panel=panel)(bundles.expanded(function))


def _group_help(ctx: typer.Context) -> None:
    """A group named alone (``jobctl schema``): its help, as help."""
    if ctx.invoked_subcommand is None and not ctx.resilient_parsing:
        print(ctx.get_help())
        raise typer.Exit()


def _builders(
    table: Mapping[str, commands.Command | commands.Group],
) -> dict[str, Callable[[], Any]]:
    return {name: functools.partial(_built, name, listed) for name, listed in table.items()}


class Commands(click_api.LazyGroup):
    """jobctl's group: the command table's commands (``cli/commands``), in its order, each
    built when it runs or is listed."""

    builders = _builders(commands.COMMANDS)


app = typer.Typer(
    name="jobctl",
    help="Triage stuck jobs in a PostgreSQL job queue: find expired leases, reclaim them "
    "(dry run first), and requeue or fail jobs by hand, every write fenced by attempt_token.",
    cls=Commands,
    invoke_without_command=True,  # bare jobctl: its help (main_options), as help
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

    run = context.invocation(ctx)
    run.debug, run.raw_dsn = debug, dsn
    run.table_typed = table if click_api.given(ctx, "table") else None
    run.targets_typed = tuple(target or ()) if click_api.given(ctx, "target") else ()
    if ctx.resilient_parsing:
        return
    if ctx.invoked_subcommand is None:  # bare jobctl: the help; options and no command: usage
        if any(click_api.given(ctx, name) for name in ctx.params):
            ctx.fail("Missing command.")
        print(ctx.get_help())
        raise typer.Exit()
    given = {
        name: ctx.params[name]
        for name in ("table", "statement_timeout", "lock_timeout", "actor")
        if click_api.given(ctx, name)
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


# ---------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> int:
    """Run jobctl; every failure becomes one line on stderr and an exit code."""
    run = context.Invocation()
    if "_JOBCTL_COMPLETE" in os.environ:  # shell completion (cli/completion): its own protocol
        from jobctl.cli import completion

        return completion.respond(click_api.lazy_group(app), os.environ, obj=run)
    try:
        group = click_api.lazy_group(app)  # builds only the command that runs
        result = group.main(args=argv, prog_name="jobctl", standalone_mode=False, obj=run)
        return result if isinstance(result, int) else 0
    except errors.Cancelled as exc:  # no or Ctrl-C at a prompt: not an error
        print(f"jobctl: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except errors.JobctlError as exc:
        _fail(run, exc, exc.message)
        return exc.exit_code
    except typer.TyperException as exc:  # click's usage errors, a bad or missing value
        message = exc.format_message()
        if click_api.missing(exc) and isinstance(exc, typer.BadParameter) and exc.ctx:
            usage = exc.ctx.get_usage().replace("Usage: ", "usage: ")  # one line still, saying
            message = f"{message} {usage}"  # how the command is used
        _fail(run, exc, message)
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
