"""What every command shares: one run's state (``Invocation``: the global options' ``--debug``
and ``--dsn`` as typed, where the command runs, the server its session found), the command's
session, and the small helpers the commands of ``cli/`` use (one database or several,
``--policy`` and the expired leases a command selects, ``--watch``, the replica mark on JSON).

The state is the root context's ``obj``, made by ``main`` for each run: nothing of one run
outlives it, and the command modules need not import ``cli.main`` (which imports them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import typer

from jobctl import db, errors
from jobctl.cli import commands, terminal
from jobctl.ops.sessions import Access
from jobctl.render import output

if TYPE_CHECKING:
    from jobctl.cli.options import Slicing
    from jobctl.db.session import Session
    from jobctl.ops.fleet import Outcome, Shown, Watching
    from jobctl.ops.standby import Standing
    from jobctl.ops.triage import ExpiredFilter
    from jobctl.targets import Where


@dataclasses.dataclass
class Invocation:
    """One run of jobctl: what its global options said and what its command found."""

    debug: bool = False
    raw_dsn: str | None = None  # --dsn as typed, to redact it from any message
    address: Where | None = None  # where the command runs (targets.address)
    standing: Standing | None = None  # the server of the command's session
    # --table and --target as typed on the command line, repeated by the next commands
    # jobctl prints (never --dsn: it may hold a password; JOBCTL_* apply to them as well)
    table_typed: str | None = None
    targets_typed: Sequence[str] = ()

    def again(self, *, targets: bool = True) -> str:
        """The global options a printed next command repeats, each followed by a space
        (``targets``: with the --target options; False where the hint names them itself)."""
        named = [("--target", t) for t in self.targets_typed] if targets else []
        named += [("--table", self.table_typed)] if self.table_typed else []
        return "".join(f"{option} {shlex.quote(value)} " for option, value in named)


def invocation(ctx: typer.Context) -> Invocation:
    """This run's state, made when the global options are read if ``main`` made none."""
    root = ctx.find_root()
    if not isinstance(root.obj, Invocation):
        root.obj = Invocation()
    return root.obj


def address(ctx: typer.Context) -> Where:
    """Where the command runs: one database's settings, or a fleet of targets, as decided
    once when the global options were read (``targets.address``)."""
    where = invocation(ctx).address
    return db.Settings() if where is None else where


def access(command: str, params: Mapping[str, Any]) -> Access:
    """What ``command`` (as typed after ``jobctl``: ``reclaim``, ``schema apply``) run with
    ``params`` (typer's, by parameter name) does to the database, as the command table says
    (``cli/commands``): the CLI's names for what the core is told as ``Access``."""
    listed = commands.find(command)
    if listed is None:
        return Access(command)
    return Access(command, writes=listed.writes_with(params), widened=listed.widened_with(params))


def command_access(ctx: typer.Context) -> Access:
    """What the command ``ctx`` runs does to the database, with the options it was given."""
    name = ctx.command_path.removeprefix(ctx.find_root().command_path).strip()
    return access(name, ctx.params)


@contextlib.contextmanager
def open_session(ctx: typer.Context) -> Iterator[Session]:
    """The command's session (connection, settings, resolved jobs table), opened by
    ``sessions.open``; the server it found is kept as this run's ``standing``."""
    from jobctl.ops import sessions
    from jobctl.targets import one_database

    settings = one_database(address(ctx), ctx.command_path)
    with sessions.open(settings, command_access(ctx), say=terminal.say) as (s, standing):
        invocation(ctx).standing = standing
        yield s


def standing(ctx: typer.Context) -> Standing | None:
    """The server the command's session found (None before it opened one)."""
    return invocation(ctx).standing


def policy_option(value: str | None) -> str | None:
    """``--policy`` checked: auto, manual, or not given."""
    if value is not None and value not in ("auto", "manual"):
        raise errors.UsageError(f"--policy {value!r} must be auto or manual")
    return value


def expired(
    slicing: Slicing,
    *,
    worker: str | None,
    policy: str | None,
    grace: dt.timedelta,
    full: bool,
    ids: Sequence[str] | None = None,
    spread: dt.timedelta = dt.timedelta(0),
    refund_attempt: bool = False,
    park_older_than: dt.timedelta | None = None,
) -> ExpiredFilter:
    """The expired leases the options of ``stuck`` or ``reclaim`` select (``--policy``
    checked), of the jobs ``slicing`` says, and how reclaim returns them: the core's
    ``ExpiredFilter``."""
    from jobctl.ops.triage import ExpiredFilter

    return ExpiredFilter(
        worker=worker,
        policy=policy_option(policy),
        ids=ids or None,
        grace=grace,
        what=slicing.slice(),
        spread=spread,
        refund_attempt=refund_attempt,
        park_older_than=park_older_than,
        full=full,
    )


def marked(ctx: typer.Context, doc: output.Document) -> output.Document:
    """On a standby, JSON carries a ``replica`` field (docs/replicas.md)."""
    from jobctl.ops import standby

    return standby.mark(doc, standing(ctx))


def say_if(line: str | None) -> None:
    if line:
        terminal.say(line)


def warn_password_on_command_line(ctx: typer.Context) -> None:
    """A command that runs for long (the service, a watch) keeps its command line, the
    password in --dsn with it, visible to every user of the machine (ps) all that time."""
    if db.holds_password(invocation(ctx).raw_dsn):
        terminal.say(
            "jobctl: warning: the password in --dsn stays visible in the process list (ps) "
            "while this runs: set JOBCTL_DSN, or keep it in a password file (PGPASSFILE)"
        )


# ---------------------------------------------------------------- one database or several
def exit_code(outcomes: Sequence[Outcome[Any]], *, refresh: bool = False) -> int:
    """The exit code the targets' failures make (0 when none), once what each target said
    and each failure are printed, one line each, in the targets' order (one database's
    outcome never holds either: its lines said at once, its failure raised). ``refresh``: one
    refresh of a watch's."""
    from jobctl.ops import fleet

    for o in outcomes:
        for line in o.said:
            terminal.say(f"jobctl: target {o.target.name}: {line.removeprefix('jobctl: ')}")
    for o in outcomes:
        if o.error is not None:
            terminal.say(f"jobctl: error: {fleet.failure_line(o)}")
    failed = [o for o in outcomes if not o.ok]
    if failed and len(failed) < len(outcomes):
        some = f"jobctl: {len(failed)} of {len(outcomes)} targets failed"
        terminal.say(
            f"{some} this refresh: its line holds the others' rows only"
            if refresh
            else f"{some}: the output above is the others' only"
        )
    return fleet.exit_code(outcomes)


def live(
    ctx: typer.Context,
    out: output.Output,
    fmt: str | None,
    every: dt.timedelta,
    doc_of: Callable[[list[Outcome[Any]]], output.Document],
) -> Callable[[], contextlib.AbstractContextManager[Shown[Any]]]:
    """``--watch``'s view of each refresh's outcomes (``fleet.Watching.live``): in place on a
    terminal, what the targets said above the table; else one JSON line per refresh, and
    the lines on stderr as one run's."""
    from jobctl.render import views

    @contextlib.contextmanager
    def view() -> Iterator[Shown[Any]]:
        warn_password_on_command_line(ctx)
        in_place = terminal.refreshed_in_place(out, fmt)
        with terminal.live(out, fmt, every.total_seconds()) as show:

            def shown(at: dt.datetime, outcomes: list[Outcome[Any]]) -> None:
                doc = doc_of(outcomes)
                if not in_place:
                    exit_code(outcomes, refresh=True)
                    show(at, doc)
                    return
                show(at, views.with_target_lines(doc, target_lines(outcomes)))

            yield shown

    return view


def target_lines(outcomes: Sequence[Outcome[Any]]) -> list[tuple[str, str]]:
    """What each target said, then why each failed, as (target, line)."""
    from jobctl.ops import fleet

    said = [(o.target.name, line.removeprefix("jobctl: ")) for o in outcomes for line in o.said]
    failed = [(o.target.name, f"error: {fleet.failure_message(o)}") for o in outcomes if not o.ok]
    return said + failed


def with_findings(code: int, found: bool) -> int:
    """The exit code with --exit-code's findings (4) in it: a failed target (1) outranks them."""
    return errors.worst_exit_code([code, errors.EXIT_FINDINGS]) if found else code


def exit_with(code: int) -> None:
    if code:
        raise typer.Exit(code)


def watching(
    ctx: typer.Context,
    watch: bool,
    every: dt.timedelta,
    count: int | None,
    doc_of: Callable[[list[Outcome[Any]]], output.Document],
    out: output.Output,
    fmt: str | None,
) -> Watching[Any] | None:
    """``--watch``'s refreshes, each shown as ``doc_of`` makes it (None: no --watch)."""
    from jobctl.ops import fleet

    if not watch:
        return None
    return fleet.Watching(every, count, live(ctx, out, fmt, every, doc_of))
