"""Options several commands share, defined once (``Annotated`` aliases for typer), and the
bundles of them that commands take as one parameter (``Slicing``, ``Bulk``: ``cli/bundles``).
What they call as typer parses them (parsers, completion, callbacks): ``cli/parameters``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from jobctl import targets
from jobctl.cli import parameters
from jobctl.cli.bundles import Bundle
from jobctl.render import output

if TYPE_CHECKING:
    from jobctl.cli.click_api import OptionInfo
    from jobctl.ops.slices import Slice


def Duration(
    help: str,
    *,
    name: str | None = None,
    show_default: str | None = None,
    floor: tuple[dt.timedelta, str] | None = None,
) -> OptionInfo:
    """A DURATION option; ``name``: its flag (else the parameter's, as typer names it);
    ``show_default`` gives its default as typed (e.g. "2s": the help says ``[default: 2s]``,
    as a value, where typer would say ``(2s)``); ``floor``: the shortest value accepted, and
    why (a shorter one is refused by the parser, exit 2)."""
    if show_default is not None:
        help = f"{help}  [default: {show_default}]"
    parser = parameters.duration if floor is None else parameters.at_least(floor)
    names = () if name is None else (name,)
    option: OptionInfo = typer.Option(
        *names, parser=parser, metavar="DURATION", help=help, show_default=show_default is None
    )
    return option


# ---------------------------------------------------------------- flags of several meanings
# A flag that commands take with their own help (or type, or bound) is declared here once, by
# a factory that takes what differs (pip's cmdoptions); each command's variant is an alias
# below, or the factory called in its signature. tests/unit/test_option_declarations.py
# counts: every flag declared in one place, every int option bounded on the option.

# the largest --limit of a read kept whole in memory (stuck, review: their table), and of
# what jobctl top reads per view (its screen's rows)
ROWS_READ_MAX = 1_000_000
TOP_ROWS_MAX = 10_000


def limit(help: str = "At most this many rows.", *, most: int | None = None) -> OptionInfo:
    """--limit N: 1 at least, ``most`` at most (None: no bound); typer's help shows both."""
    option: OptionInfo = typer.Option("--limit", min=1, max=most, metavar="N", help=help)
    return option


def exit_code(help: str) -> OptionInfo:
    """--exit-code: exit 4 (``errors.EXIT_FINDINGS``) on what ``help`` says."""
    option: OptionInfo = typer.Option("--exit-code", help=help)
    return option


def kind(help: str) -> OptionInfo:
    """--kind K: one kind (``str``) or several (``list[str]``, repeatable), by the annotation."""
    option: OptionInfo = typer.Option("--kind", metavar="K", help=help)
    return option


def queue(help: str) -> OptionInfo:
    """--queue Q, as ``kind``."""
    option: OptionInfo = typer.Option("--queue", metavar="Q", help=help)
    return option


def commit(help: str) -> OptionInfo:
    """--commit/--dry-run: the dry run is the default."""
    option: OptionInfo = typer.Option("--commit/--dry-run", help=help)
    return option


def reason(help: str) -> OptionInfo:
    """--reason TEXT: why, recorded (``help`` says where, and whether it is required)."""
    option: OptionInfo = typer.Option("--reason", metavar="TEXT", help=help)
    return option


def plan(help: str) -> OptionInfo:
    """--plan FILE: a saved plan to apply."""
    option: OptionInfo = typer.Option("--plan", metavar="FILE", help=help)
    return option


def save_plan(help: str) -> OptionInfo:
    """--save-plan FILE: the rows listed, saved as a plan."""
    option: OptionInfo = typer.Option("--save-plan", metavar="FILE", help=help)
    return option


def worker(help: str, *, complete: bool = False) -> OptionInfo:
    """--worker NAME; ``complete``: TAB offers the workers of the table's processing jobs."""
    option: OptionInfo = typer.Option(
        "--worker",
        metavar="NAME",
        help=help,
        autocompletion=(
            (lambda ctx, incomplete: parameters.from_database(ctx, "complete_workers", incomplete))
            if complete
            else None
        ),
    )
    return option


def actor(help: str, *, envvar: str | None = None) -> OptionInfo:
    """--actor NAME: who acts (the global option, ``envvar`` its default) or a filter."""
    option: OptionInfo = typer.Option(
        "--actor", envvar=envvar, metavar="NAME", help=help, show_default=False
    )
    return option


def since(help: str, *, duration: bool = False) -> OptionInfo:
    """--since: a WHEN as typed (a duration or a timestamp: ``events.bound`` reads it), or
    (``duration``) a DURATION."""
    if duration:
        return Duration(help, name="--since")
    option: OptionInfo = typer.Option("--since", metavar="WHEN", help=help)
    return option


def older_than(help: str) -> OptionInfo:
    """--older-than DURATION."""
    return Duration(help, name="--older-than")


def every(
    help: str,
    *,
    show_default: str | None = None,
    floor: tuple[dt.timedelta, str] = parameters.WATCH_FLOOR,
) -> OptionInfo:
    """--every DURATION: a refresh's or the service's period, never below ``floor``."""
    return Duration(help, name="--every", show_default=show_default, floor=floor)


def expiring_within(help: str, *, show_default: str | None = None) -> OptionInfo:
    """--expiring-within DURATION: the live leases about to run out."""
    return Duration(help, name="--expiring-within", show_default=show_default)


def listing(help: str) -> OptionInfo:
    """--list: what is recorded, listed instead of written."""
    option: OptionInfo = typer.Option("--list", help=help)
    return option


def status(metavar: str, help: str) -> OptionInfo:
    """--status (repeatable): a status filter, or a table's own status value."""
    option: OptionInfo = typer.Option("--status", metavar=metavar, help=help)
    return option


def history(help: str, *, switch: bool = False) -> OptionInfo:
    """--history: the history mode schema apply installs (a value), or (``switch``) whether
    schema remove deletes the history (--history/--keep-history)."""
    if switch:
        option: OptionInfo = typer.Option("--history/--keep-history", help=help)
        return option
    option = typer.Option(
        "--history",
        metavar="|".join(HISTORY_MODES),
        autocompletion=lambda incomplete: [m for m in HISTORY_MODES if m.startswith(incomplete)],
        help=help,
    )
    return option


HISTORY_MODES = ("transitions", "late", "exact", "audit")


def _format_with_output(
    ctx: typer.Context, param: typer.CallbackParam, value: output.Output | str | None
) -> output.Output | str | None:
    """--format is for -o table: with any other -o it would be ignored, so it is refused (exit
    2) before the command runs. Each of the two options checks when the other is parsed."""
    other = "fmt" if param.name == "out" else "out"
    if other in ctx.params:
        out, fmt = (value, ctx.params[other]) if param.name == "out" else (ctx.params[other], value)
        chosen = None if out is None else output.Output(out)
        if fmt is not None and chosen is not None and chosen is not output.Output.table:
            raise typer.BadParameter(
                f"--format {fmt} is for -o table; -o {chosen.value} has no table format",
                param_hint="'--format'",
            )
    # -o as its enum whatever typer does after a callback: before 0.29 it converts the value
    # again (from its str(), hence Output.__str__), from 0.29 it keeps what the callback returns
    return output.Output(value) if param.name == "out" and value is not None else value


Out = Annotated[
    output.Output,
    typer.Option(
        "--output",
        "-o",
        metavar="|".join(o.value for o in output.Output),
        callback=_format_with_output,
        help="table (fitted to a terminal's width, every column when piped), wide (every "
        "column on a terminal too), json, jsonl, csv, tsv.",
    ),
]
Format = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="FORMAT",
        callback=_format_with_output,
        help="Any tabulate table format for -o table: plain, github, psql, ...",
    ),
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Confirm without a prompt.")]


Worker = Annotated[str | None, worker("Only this worker's jobs.", complete=True)]
Policy = Annotated[
    str | None,
    typer.Option(
        metavar="auto|manual", help="Only this policy.", autocompletion=parameters.complete_policies
    ),
]
Grace = Annotated[
    dt.timedelta,
    Duration("Only leases expired longer ago than this.", show_default="0s"),
]
TrustReplica = Annotated[
    bool,
    typer.Option(
        "--trust-replica",
        help="On a standby, call a lease expired as the standby has it, not widened by its "
        "replay lag.",
    ),
]
Soon = Annotated[
    dt.timedelta | None,
    expiring_within(
        "Window for 'expiring soon' (else: the last third of each lease).",
        show_default="the lease's last third",
    ),
]
Watch = Annotated[bool, typer.Option("--watch", help="Refresh in place until Ctrl-C.")]
Every = Annotated[dt.timedelta, every("Watch refresh (100ms at least).", show_default="2s")]
Count = Annotated[
    int | None,
    typer.Option("--count", min=1, metavar="N", help="Stop watching after N refreshes."),
]
Reason = Annotated[str | None, reason("Why: recorded in the history.")]
RequiredReason = Annotated[str, reason("Why (required): becomes last_error.")]  # fail, cancel


ExpectToken = Annotated[
    uuid.UUID | None,
    typer.Option(
        parser=parameters.attempt_token,
        metavar="UUID",
        help="Act only if the job's attempt token is this UUID (your copy, e.g. from stuck).",
    ),
]
Force = Annotated[
    bool, typer.Option(help="Act even on a live lease or a claim with no lease within the hour.")
]
Full = Annotated[  # show, history, explain, events: long texts whole (else cut on the server)
    bool,
    typer.Option(
        "--full",
        help="Every byte of long values (else cut at 4096 characters, with a note).",
    ),
]
PrintSql = Annotated[bool, typer.Option("--sql", help="Print the SQL instead.")]
# schema apply: the history mode (the table's own names: cli/mapping_options)
HistoryMode = Annotated[
    str | None,
    history(
        "What the history records: transitions (the default on a first install: "
        "attempts that did not complete, every status change, jobctl's writes), late (also "
        "completed attempts and late heartbeats, at a cost), exact (also every heartbeat, "
        "at a higher cost), audit (only jobctl's own writes). Default: keep the installed "
        "mode."
    ),
]
NoWorkerHistory = Annotated[
    bool, typer.Option("--no-worker-history", help="Same as --history audit.")
]
LockDeadline = Annotated[  # schema apply and schema remove: their short lock tries
    dt.timedelta,
    Duration(
        "How long to keep trying for the locks on a busy table (each try holds the "
        "workers up 150 ms at most); then exit 1, the current step undone.",
        show_default="5m",
    ),
]


# --since/--until of events and report: a duration (that long ago) or a timestamp, as
# typed; events.bound reads it (a bad one: exit 2)
Since = Annotated[str | None, since("From this long ago (2h) or this time (2026-12-01T06:00:00Z).")]
Until = Annotated[
    str | None,
    typer.Option(metavar="WHEN", help="Up to this long ago or this time (default: now)."),
]


# ---------------------------------------------------------------- global options
Dsn = Annotated[
    str | None,
    typer.Option(
        metavar="DSN",
        help="Connection string. Default: JOBCTL_DSN, DATABASE_URL, then libpq's PG* "
        "variables and service files.",
        show_default=False,
    ),
]
Table = Annotated[
    str,
    typer.Option(
        envvar="JOBCTL_TABLE", metavar="TABLE", help="Jobs table, schema-qualified allowed."
    ),
]
Targets = Annotated[
    list[str] | None,
    typer.Option(
        "--target",
        metavar="NAME",
        help="A database named in the config file (repeatable: several at once). Default: "
        "JOBCTL_TARGET.",
        show_default=False,
        autocompletion=lambda incomplete: targets.names(incomplete),
    ),
]
AllTargets = Annotated[
    bool, typer.Option("--all-targets", help="Every target of the config file, at once.")
]
StatementTimeout = Annotated[
    dt.timedelta,
    Duration("Per transaction (1ms at least).", show_default="30s", floor=parameters.TIMEOUT_FLOOR),
]
LockTimeout = Annotated[
    dt.timedelta,
    Duration("Per transaction (1ms at least).", show_default="2s", floor=parameters.TIMEOUT_FLOOR),
]
Actor = Annotated[
    str | None,
    actor("Who acts, for the audit trail. Default: user@host.", envvar="JOBCTL_ACTOR"),
]
Debug = Annotated[
    bool, typer.Option("--debug", help="Show a traceback on errors (passwords redacted).")
]


# ---------------------------------------------------------------- job ids


# Ids are text here: the database converts them to the id column's type (bigint, uuid, text
# ...), and refuses one that is not valid for it (exit 2; see session.Session.job_ids).
JobId = Annotated[
    str,
    typer.Argument(
        help="Job id.",
        metavar="ID",
        autocompletion=parameters.complete_ids,
        callback=parameters.not_an_option,
    ),
]

JobIdsOrStdin = Annotated[
    list[str] | None,
    typer.Argument(
        help="Job ids; - reads them from stdin (one per line, or JSON lines with an id).",
        metavar="[ID...|-]",
        autocompletion=parameters.complete_ids,
        callback=parameters.not_an_option,
        show_default=False,
    ),
]
ReviewPlan = Annotated[
    Path | None,
    plan(
        "Act on the rows of a plan saved by jobctl review --save-plan, each only if "
        "unchanged since."
    ),
]

# ---------------------------------------------------------------- reclaim
Commit = Annotated[bool, commit("Apply, or only preview (the default).")]
# ops.reclaim.request's MIN_BATCH, MAX_BATCH (its check serves the library's callers; it is
# not imported here, at every command's start: tests/unit/test_option_declarations.py)
BATCH_SIZE = (1, 10_000)
BatchSize = Annotated[
    int,
    typer.Option(min=BATCH_SIZE[0], max=BATCH_SIZE[1], metavar="N", help="Rows per transaction."),
]
Limit = Annotated[int | None, limit()]  # reclaim, events: every row by default
RowLimit = Annotated[int, limit(most=ROWS_READ_MAX)]  # stuck, review: a table read whole
OnlyIds = Annotated[
    list[str] | None,
    typer.Option("--id", metavar="ID", help="Only this job (repeatable)."),
]
SavePlan = Annotated[Path | None, save_plan("With the dry run: write the reviewed rows to FILE.")]
ApplyPlan = Annotated[Path | None, plan("With --commit: apply only the rows of this saved plan.")]
ServeEvery = Annotated[
    dt.timedelta | None,
    every(
        "Repeat every DURATION (100ms at least): the reclaimer service (needs --commit --yes).",
        floor=parameters.SERVICE_FLOOR,
    ),
]

# what the job is: the table's mapped kind and queue columns, its last error
Kinds = Annotated[
    list[str] | None, kind("Only jobs of this kind (repeatable; the mapped kind column).")
]
Queues = Annotated[
    list[str] | None, queue("Only jobs of this queue (repeatable; the mapped queue column).")
]
ErrorText = Annotated[
    str | None,
    typer.Option(
        "--error",
        metavar="TEXT",
        help="Only jobs whose last error contains TEXT (any case).",
    ),
]


@dataclasses.dataclass(frozen=True)
class Slicing(Bundle):
    """--kind, --queue, --error as given: what the job is, as a command narrows by it."""

    kind: Kinds = None
    queue: Queues = None
    error: ErrorText = None

    def slice(self) -> Slice:
        """The core's ``Slice``."""
        from jobctl.ops.slices import Slice

        return Slice(tuple(self.kind or ()), tuple(self.queue or ()), self.error or None)


ANY_JOB = Slicing()  # no --kind, --queue or --error


# requeue / fail on a filter
BulkStatuses = Annotated[
    list[str] | None,
    status(
        "queued|processing|failed|parked",
        "With a filter: only jobs in this status (repeatable, or a comma list; default: "
        "failed and the park status).",
    ),
]
BulkOlderThan = Annotated[
    dt.timedelta | None, older_than("With a filter: only jobs last changed longer ago than this.")
]
BulkNoLease = Annotated[
    bool,
    typer.Option(
        "--no-lease",
        help="With a filter: only processing jobs with no lease (claimed by code that sets "
        "none; reclaim never touches them).",
    ),
]
BulkLimit = Annotated[int, limit("With a filter: at most this many jobs.")]
BulkSavePlan = Annotated[
    Path | None,
    save_plan("With a filter: write the listed jobs to FILE as a plan, for --plan FILE."),
]


@dataclasses.dataclass(frozen=True)
class Bulk(Bundle):
    """The rest of requeue's, fail's and cancel's filter (after --kind, --queue, --error and
    --status): the jobs' worker, their age, the lease-less ones only, and how many."""

    worker: Worker = None
    older_than: BulkOlderThan = None
    no_lease: BulkNoLease = False
    limit: BulkLimit = 10_000


BULK_DEFAULTS = Bulk()


# reclaim and requeue: the work returned paced
Spread = Annotated[
    dt.timedelta,
    Duration(
        "Return the requeued jobs spread evenly over this long (with jitter), not all at "
        "once: no thundering herd on the workers that just recovered.",
        show_default="0s",
    ),
]

# reclaim: a deploy's orphans
RefundAttempt = Annotated[
    bool,
    typer.Option(
        "--refund-attempt",
        help="Give the requeued jobs their killed attempt back (attempts - 1, never below 0; "
        "recorded in the history): the deaths were a deploy's, not the jobs'.",
    ),
]
ParkOlderThan = Annotated[
    dt.timedelta | None,
    Duration(
        "Park (or fail) for review, not requeue, expired jobs claimed longer ago than this: "
        "very old orphans are not run again silently."
    ),
]

# summary --by and metrics' labels
SummaryBy = Annotated[
    str | None,
    typer.Option(
        metavar="kind|queue|worker|error",
        help="Counts per kind, queue, worker or kind of error (its first line, numbers "
        "and ids normalized) instead.",
    ),
]
LabelTop = Annotated[
    int,
    typer.Option(
        min=1,
        metavar="N",
        help="Label the job counts by kind and queue (when mapped) for the top N of each "
        "by count; the rest as other.",
    ),
]
