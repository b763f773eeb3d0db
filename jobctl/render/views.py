"""What each command shows: its result as a ``Document`` (the JSON payload, the contract,
and the same data as titled tables). Pure: no database, no printing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from jobctl.contract import shapes
from jobctl.render import judgements, pause_views, rows
from jobctl.render.output import Document, Section, key_values
from jobctl.render.screen import Column

# ---------------------------------------------------------------- terminal columns
# What each row shape shows on a terminal (``screen.layout``): priority 0 always, then by
# priority as the width allows; -o wide shows every one. Piped tables keep ``rows.*_COLUMNS``.


def _paint(styles: dict[str, str]) -> Callable[[str], str]:
    """A style by cell text: colour that repeats what the text says (never alone)."""
    return lambda text: styles.get(text.strip("()"), "")


ACTION_STYLE = _paint({"requeue": "green", "fail": "red"})
STATE_STYLE = _paint(
    {"expired": "red", "expiring": "yellow", "live": "green", "no lease": "magenta"}
)
OUTCOME_STYLE = _paint(
    {
        "requeued": "green",
        "policy_changed": "green",
        "quarantined": "yellow",
        "refused": "yellow",
        **dict.fromkeys(("failed", "cancelled", "conflict", "not_found", "locked"), "red"),
    }
)


def _attempts(row: Any) -> str:
    return f"{row.get('attempts')}/{row.get('max_attempts')}"


def _skipped(found: Sequence[Any]) -> bool:
    return any(r.get("skipped") for r in found)


def _skipped_leased(found: Sequence[Any]) -> bool:
    """A lease's row that reclaim would pass by (locked, or lease times out of range): a
    row with no lease says so in STATE, and the line under the table says what it means."""
    return any(r.get("skipped") and r.get("lease_state") != "none" for r in found)


def _skipped_lease(row: Any) -> object:
    return None if row.get("lease_state") == "none" else row.get("skipped")


def _no_lease(found: Sequence[Any]) -> bool:
    return any(r.get("lease_state") == "none" for r in found)


def _state(row: Any) -> str:
    """A lease state as a table shows it: ``none`` (processing with no lease) as no lease."""
    state = row.get("lease_state")
    return "no lease" if state == "none" else str(state or "")


ID = Column("id", "ID", whole=True)
WORKER = Column("reserved_by", "WORKER", whole=True)


def _has(key: str) -> Callable[[Sequence[Any]], bool]:
    return lambda found: any(key in r for r in found)


# what the job is, where the table maps it: beside the id, as the width allows
KIND = Column("kind", "KIND", priority=1, when=_has("kind"))
QUEUE = Column("queue", "QUEUE", priority=2, when=_has("queue"))
# the job's priority, where the table keeps one (stuck): after the attempts, as the width allows
PRIORITY = Column("priority", "PRIORITY", priority=4, when=_has("priority"))


STUCK_VIEW = [
    ID,
    KIND,
    QUEUE,
    WORKER,
    Column("recovery_policy", "POLICY", whole=True, value=judgements.policy),
    Column("attempts", "ATTEMPTS", priority=3, value=_attempts),
    PRIORITY,
    Column("lease_state", "STATE", whole=True, value=_state, style=STATE_STYLE, when=_no_lease),
    Column("lease_overdue_s", "OVERDUE", kind="seconds"),
    Column("claimed_age_s", "CLAIMED", kind="ago", when=_no_lease, drop=1),
    Column("heartbeat_age_s", "HEARTBEAT", kind="ago", drop=3),
    Column("action", "ACTION", whole=True, style=ACTION_STYLE),
    Column("reclaim_count", "RECLAIMS", priority=5),
    Column("lease_expires_at", "EXPIRED AT", priority=6, kind="time"),
    Column("reserved_at", "CLAIMED AT", priority=7, kind="time"),
    Column("attempt_token", "TOKEN", priority=8, whole=True),
    Column("skipped", "SKIPPED", when=_skipped_leased, value=_skipped_lease, drop=2),
]


def _pending(row: Any) -> str:
    """A live lease's action is what reclaim would do once it runs out, not now."""
    return str(row["action"]) if row.get("lease_state") != "expiring" else f"({row['action']})"


AT_RISK_VIEW = [
    ID,
    KIND,
    QUEUE,
    WORKER,
    Column("lease_state", "STATE", whole=True, value=_state, style=STATE_STYLE),
    Column("lease_overdue_s", "EXPIRY", kind="until"),
    Column("claimed_age_s", "CLAIMED", kind="ago", when=_no_lease, drop=1),
    Column("heartbeat_age_s", "HEARTBEAT", kind="ago", drop=3),
    Column("action", "ACTION", whole=True, value=_pending, style=ACTION_STYLE),
    Column("recovery_policy", "POLICY", priority=3, value=judgements.policy),
    Column("attempts", "ATTEMPTS", priority=4, value=_attempts),
    dataclasses.replace(PRIORITY, priority=5),
    Column("worker_heartbeat_lag_s", "WORKER LAG", priority=6, kind="seconds"),
    Column("reclaim_count", "RECLAIMS", priority=7),
    Column("lease_expires_at", "EXPIRES AT", priority=8, kind="time"),
    Column("attempt_token", "TOKEN", priority=9, whole=True),
    Column("skipped", "SKIPPED", when=_skipped_leased, value=_skipped_lease, drop=2),
]
AT_RISK_NOTE = "(action): what reclaim will do once the lease runs out, not now"
RECLAIM_VIEW = [
    ID,
    KIND,
    QUEUE,
    WORKER,
    Column("recovery_policy", "POLICY", whole=True, value=judgements.policy),
    Column("attempts", "ATTEMPTS", priority=3, value=_attempts),
    Column("lease_overdue_s", "OVERDUE", kind="seconds"),
    Column("action", "ACTION", whole=True, style=ACTION_STYLE),
    Column("applied", "APPLIED", when=lambda found: any(r.get("applied") for r in found)),
    Column("skipped", "SKIPPED", when=_skipped),
]
MANUAL_VIEW = [
    ID,
    Column("outcome", "OUTCOME", whole=True, style=OUTCOME_STYLE),
    WORKER,
    Column("status_before", "WAS", priority=1),
    Column("lease_state", "LEASE", priority=2, style=STATE_STYLE),
    Column("attempt_token", "TOKEN", priority=3, whole=True),
    Column("detail", "DETAIL"),
]
PREVIEW_VIEW = [
    ID,
    KIND,
    QUEUE,
    Column("status", "STATUS", whole=True),
    WORKER,
    Column("recovery_policy", "POLICY", value=judgements.policy),
    Column("lease_state", "LEASE", style=STATE_STYLE),
    Column("attempts", "ATTEMPTS", priority=3, value=_attempts),
    Column("reclaim_count", "RECLAIMS", priority=4),
    Column("attempt_token", "TOKEN", priority=5, whole=True),
]


BULK_VIEW = [  # requeue / fail on a filter: what it matched
    ID,
    KIND,
    QUEUE,
    Column("status", "STATUS", whole=True),
    Column("recovery_policy", "POLICY", priority=4, value=judgements.policy),
    Column("attempts", "ATTEMPTS", priority=3, value=_attempts),
    Column("reclaim_count", "RECLAIMS", priority=5),
    Column("lease_state", "LEASE", priority=6, style=STATE_STYLE),
    Column("last_error", "LAST ERROR"),
]


def claimed(claims: Mapping[str, Any] | None) -> str:
    """What a role not jobctl's declared, as a cell: ``alice@ops: requeued``."""
    if not claims:
        return ""
    return ": ".join(claims[k] for k in ("actor", "action") if claims.get(k))


def _any_claimed(found: Sequence[Mapping[str, Any]]) -> bool:
    return any(r.get("claimed") for r in found)


EVENT_VIEW = [
    Column("at", "AT", kind="time"),
    Column("event", "EVENT", whole=True),
    Column("to_status", "BECAME", value=pause_views.became),
    Column("attempt", "#"),
    Column("worker", "WORKER", whole=True),
    Column("actor", "ACTOR", priority=1),
    Column("db_role", "ROLE", priority=2),
    # what a role that is not jobctl's declared (a forged manual action): never hidden
    Column("claimed", "CLAIMED", value=lambda r: claimed(r["claimed"]), when=_any_claimed),
    Column("reason", "REASON", priority=3),
    Column("attempt_token", "TOKEN", priority=4, whole=True),
]


ATTEMPT_VIEW = [  # the token whole: it is what --expect-token takes
    Column("attempt", "#"),
    Column("worker", "WORKER", whole=True),
    Column("attempt_token", "TOKEN", whole=True, copy=True),
    # dropped (-o wide adds it; the events say it too) before a worker is cut: at 80 columns
    # a worker like "delayed_job.4 host:web-old-3 pid:17012" and a token leave it no room
    Column("outcome", "OUTCOME", style=OUTCOME_STYLE, drop=1),
    Column("claimed_at", "CLAIMED", priority=1, kind="time"),
    Column("ended_at", "ENDED", priority=2, kind="time"),
    # the heartbeat statistics only the late and exact history modes keep: left out when
    # empty (the default mode's), not shown blank
    Column("heartbeats", "BEATS", priority=3, filled=True),
    Column("late_heartbeats", "LATE", priority=4, filled=True),
    Column("max_heartbeat_gap_s", "MAX GAP", priority=5, kind="seconds", filled=True),
    Column("last_heartbeat_at", "LAST BEAT", priority=6, kind="time", filled=True),
]
HISTORY_HEAD_VIEW = [
    ID,
    KIND,
    QUEUE,
    Column("status", "STATUS", whole=True),
    Column("lease_state", "LEASE", style=STATE_STYLE),
    Column("attempts", "ATTEMPTS", value=_attempts),
    Column("reclaim_count", "RECLAIMS"),
    Column("recovery_policy", "POLICY", value=judgements.policy),
    Column("last_error", "LAST ERROR"),
]
FIELD_VIEW = [
    Column("field", "FIELD", whole=True),
    Column("value", "VALUE"),  # a token fits beside the field names at 80 columns
]
CHECK_VIEW = [  # schema check: a failed check's detail in full follows the table (cli_schema)
    Column("ok", "OK", whole=True, style=lambda text: "green" if text == "yes" else "red"),
    Column("check", "CHECK"),
    Column("detail", "DETAIL"),
]
SUMMARY_WORKER_VIEW = [
    Column("worker", "WORKER", whole=True),
    Column("processing", "PROCESSING"),
    Column("expired", "EXPIRED"),
    Column("expired_manual", "MANUAL"),
    Column("expiring_soon", "SOON"),
    Column("heartbeat_lag_s", "LAG", kind="seconds"),
    Column("first_expiry", "FIRST EXPIRY", priority=2, kind="time"),
    Column("last_expiry", "LAST EXPIRY", priority=3, kind="time"),
    Column("last_seen_at", "LAST SEEN", priority=1, kind="time"),
]

REVIEW_VIEW = [
    ID,
    KIND,
    QUEUE,
    Column("why", "WHY", whole=True, value=judgements.why),
    Column("last_worker", "LAST WORKER", whole=True),
    Column("waited_s", "WAITED", kind="seconds"),
    Column("attempts", "ATTEMPTS", priority=3, value=_attempts),
    Column("reclaim_count", "RECLAIMS", priority=4),
    Column("reclaimed_at", "RECLAIMED AT", priority=5, kind="time"),
    Column("last_error", "LAST ERROR", priority=6),
]

JOB_EVENT_VIEW = [
    Column("at", "AT", kind="time"),
    Column("id", "ID", whole=True),
    Column("kind", "KIND", priority=6, when=_has("kind")),  # after the history's own
    Column("queue", "QUEUE", priority=7, when=_has("queue")),
    Column("event", "EVENT", whole=True),
    Column("to_status", "BECAME", value=pause_views.became),
    Column("worker", "WORKER", whole=True),
    Column("actor", "ACTOR", priority=1),
    Column("reason", "REASON", priority=3),
    Column("attempt", "#", priority=2),
    Column("db_role", "ROLE", priority=4),
    Column("from_status", "WAS", priority=5),
]


def table(
    payload: Any,
    found: Iterable[Any],
    columns: Sequence[str] | None = None,
    view: Sequence[Column] | None = None,
    keys: Sequence[str] | None = None,
) -> Document:
    """One untitled table; ``payload`` is what JSON shows (often the same rows, streamed);
    ``keys``: every key JSON carries of a row, the header of -o csv/tsv (None: ``columns``)."""
    return Document(payload, [Section(None, found, columns, view, keys=keys)])


def some_rows(
    shown: list[Any],
    total: int,
    columns: Sequence[str] | None = None,
    view: Sequence[Column] | None = None,
    keys: Sequence[str] | None = None,
) -> Document:
    """``shown`` of ``total`` rows, the table's title saying how many when it is not all of
    them (thousands of rows on a terminal help nobody; the rest are behind ``-o``)."""
    title = None
    if len(shown) < total:
        title = (
            f"{len(shown)} of {total} rows shown: the first ones and any skipped "
            "(every row: -o jsonl, -o json or -o csv)"
        )
    return Document(shown, [Section(title, shown, columns, view, keys=keys)])


def stuck(
    found: list[Any],
    columns: list[str],
    *,
    at_risk: bool = False,
    optional: Sequence[str] | None = None,
) -> Document:
    """Stuck rows; a ``skipped`` column only when some row is locked by another session.
    ``optional``: the mapped optional columns (kind, queue; None: those the rows carry)."""
    shown = rows.with_optional(columns, found)
    shown += ["skipped"] if any(r["skipped"] for r in found) else []
    keys = rows.with_optional(
        rows.AT_RISK_KEYS if at_risk else rows.STUCK_KEYS, found if optional is None else optional
    )
    if not at_risk:
        return table(found, found, shown, STUCK_VIEW, keys)
    live = any(r.get("lease_state") == "expiring" for r in found)
    note = AT_RISK_NOTE if live else None
    return Document(found, [Section(None, found, shown, AT_RISK_VIEW, note, keys)])


def no_lease_line(
    count: int, *, shown: int | None = None, collapsed: bool = False, again: str = ""
) -> str | None:
    """What an operator reads under a list or a count holding processing jobs with no lease
    (None: there are none). ``count`` is all of them, never only the rows a limit let
    through; ``shown``: how many of them the list holds, when that is fewer; ``collapsed``:
    a terminal listed none of them beside the leases above (``streamed.beside_leases``);
    ``again``: the global options typed, repeated by the commands it names."""
    if not count:
        return None
    of = f", {shown} of them shown" if shown is not None and shown < count else ""
    lists = ""
    if collapsed:
        of = ", not listed beside the leases above"
        lists = f"jobctl {again}stuck -o wide lists them, "
    return (
        f"{count} processing job(s) have no lease{of} (claimed by code that sets none): reclaim "
        f"never touches them and jobctl cannot tell slow from dead; {lists}jobctl {again}explain "
        f"ID says what to do, jobctl {again}doctor finds the writer"
    )


def review(
    found: list[Any], *, several: bool = False, optional: Sequence[str] | None = None
) -> Document:
    """The jobs awaiting review; one database's table shows its mapped optional columns
    (``optional``, kind and queue, with no row too; None: those the rows carry), across
    targets (``several``) the review's columns after the target."""
    if several:
        return across_targets(
            table(found, found, rows.REVIEW_COLUMNS, REVIEW_VIEW, rows.REVIEW_KEYS)
        )
    mapped = found if optional is None else optional
    shown = rows.with_optional(rows.REVIEW_COLUMNS, mapped)
    return table(found, found, shown, REVIEW_VIEW, rows.with_optional(rows.REVIEW_KEYS, mapped))


def ready_waiting_line(waiting: shapes.Row, after: str) -> str:
    """``stuck`` with nothing stuck on one database: the ready jobs that have waited longer
    than ``after`` (as typed), for "my job is stuck" often means nobody claims it."""
    from jobctl import durations

    return (
        f"nothing stuck, but {waiting['ready']} job(s) ready to run have waited longer "
        f"than {after} (the oldest {durations.human(waiting['oldest_ready_s'])})"
        ": is any worker claiming? (jobctl summary shows the queue)"
    )


SUMMARY_STATUS_KEYS = ["status", "jobs", "counted"]  # summary's jobs by status
# summary's waiting section (awaiting_review_unrecorded: summary --exact only)
SUMMARY_WAITING = ("ready", "oldest_ready_s", "awaiting_review", "awaiting_review_unrecorded")


def summary(result: shapes.Row, *, every_section: bool = False) -> Document:
    """Summary's sections, each named as its JSON key (``-o csv``/``tsv``: one table, a
    ``section`` column first); ``every_section``: the pauses' too when there is none (a
    machine format's header is the same whatever the rows)."""
    paused = result.get("paused") or []  # one database's pauses (jobctl pause)
    by_status = [
        {
            "status": status,
            "jobs": n,
            "counted": "estimate" if status in result["estimated"] else "exact",
        }
        for status, n in result["status"].items()
    ]
    return Document(
        result,
        [
            Section("jobs by status", by_status, SUMMARY_STATUS_KEYS, name="status"),
            Section("processing by lease", [result["processing"]], name="processing"),
            Section(
                "waiting",
                [{k: result[k] for k in SUMMARY_WAITING if k in result}],
                name="waiting",
            ),
            Section(
                "workers (most expired first)",
                result["workers"],
                rows.SUMMARY_WORKER_COLUMNS,
                SUMMARY_WORKER_VIEW,
                name="workers",
            ),
            *(
                [
                    Section(
                        pause_views.SUMMARY_TITLE,
                        paused,
                        pause_views.SUMMARY_COLUMNS,
                        pause_views.SUMMARY_VIEW,
                        name="paused",
                    )
                ]
                if paused or every_section
                else []
            ),
        ],
    )


def summary_by(result: shapes.Row) -> Document:
    """``summary --by``: a row per group, the most stuck first."""
    by = result["by"]
    view = [
        Column(by, by.upper(), whole=by != "error", value=lambda r: _group(r[by])),
        *SUMMARY_GROUP_VIEW,
    ]
    title = f"by {by} (most stuck first)"
    columns = [by, *rows.SUMMARY_GROUP_COLUMNS]
    return Document(result, [Section(title, result["groups"], columns, view)])


def _group(value: Any) -> str:
    return "(none)" if value is None else str(value)


SUMMARY_GROUP_VIEW = [
    Column("processing", "PROCESSING", kind="count"),
    Column("stuck", "STUCK", kind="count"),
    Column("awaiting_review", "REVIEW", kind="count"),
    Column("ready", "READY", kind="count"),
    Column("oldest_ready_s", "OLDEST READY", kind="seconds", priority=1),
    Column("live", "LIVE", kind="count", priority=2),
    Column("expiring_soon", "SOON", kind="count", priority=3),
    Column("stuck_manual", "STUCK MANUAL", kind="count", priority=4),
    Column("no_lease", "NO LEASE", kind="count", priority=5),
]


def show(job: shapes.Row, job_id: object, renamed: Mapping[str, str] | None = None) -> Document:
    """The job's fields as a two-column table, then its latest events. ``renamed``: the
    design's names the row carries for columns the table names otherwise, each with the
    table's own name, which the table for a person says beside it (``available_at (run_at)``);
    JSON keeps the design's names alone."""
    fields = {k: v for k, v in job.items() if k != "events"}
    said = [
        {**field, "field": f"{field['field']} ({renamed[field['field']]})"}
        if renamed and field["field"] in renamed
        else field
        for field in key_values(fields)
    ]
    return Document(
        job,
        [
            Section(f"job {job_id}", said, None, FIELD_VIEW),
            Section("latest events", job["events"], rows.EVENT_COLUMNS, EVENT_VIEW),
        ],
    )


def history(result: shapes.History, job_id: object, *, events_only: bool = False) -> Document:
    """The job's head, its attempts and its events, as tables for a person (``events_only``:
    the head and the events). JSON: the whole ``result``."""
    head = {
        k: result["job"].get(k)
        for k in rows.with_optional(rows.HISTORY_HEAD_COLUMNS, [result["job"]])
    }
    attempts = Section("attempts", result["attempts"], rows.ATTEMPT_COLUMNS, ATTEMPT_VIEW)
    return Document(
        result,
        [
            Section(f"job {job_id}", [head], None, HISTORY_HEAD_VIEW),
            *([] if events_only else [attempts]),
            Section("events", result["events"], rows.EVENT_COLUMNS, EVENT_VIEW),
        ],
    )


def explain(result: shapes.Row) -> Document:
    return table(result, [{"story": line} for line in result["story"]])


# ---------------------------------------------------------------- across targets
TARGET = Column("target", "TARGET", whole=True)
SUMMARY_TARGETS_VIEW = [
    TARGET,
    Column("queued", "QUEUED", kind="count"),
    Column("processing", "PROCESSING", kind="count"),
    Column("expired", "EXPIRED", kind="count"),
    Column("expiring_soon", "EXPIRING", kind="count", priority=3),
    Column("ready", "READY", kind="count", priority=4),
    Column("oldest_ready_s", "OLDEST READY", kind="seconds", priority=5),
    Column("awaiting_review", "REVIEW", kind="count"),
    Column("failed", "FAILED", kind="count", priority=6),
    Column("done", "DONE", kind="count", priority=7),
    Column("table", "TABLE", priority=8),
]


def _checked(found: Sequence[Any]) -> bool:
    return any("reachable" in r for r in found)


def _database(row: Mapping[str, Any]) -> str:
    """The database part of a target's ``where`` (host:port/dbname), or the whole of it."""
    where = str(row.get("where") or "")
    return where.rsplit("/", 1)[1] if "/" in where else where


def _host(row: Mapping[str, Any]) -> str:
    where = str(row.get("where") or "")
    return where.rsplit("/", 1)[0] if "/" in where else ""


# a terminal's columns: the database whole, the host where room is left; a problem is said
# whole under the table (``targets``), so it is no column here (piped: every key)
TARGETS_VIEW = [
    TARGET,
    Column("where", "DATABASE", whole=True, value=_database),
    Column("table", "TABLE", whole=True),
    Column("reachable", "UP", whole=True, when=_checked),
    Column("role", "ROLE", whole=True, when=_checked),
    Column("schema", "SCHEMA", whole=True, when=_checked),
    Column("stuck", "STUCK", kind="count", when=_checked),
    Column("host", "HOST", priority=1, value=_host),
    Column("from", "FROM", priority=2),
    Column("server", "SERVER", priority=3, when=_checked),
]


TARGET_LINES_VIEW = [TARGET, Column("line", "SAYS")]


def with_target_lines(doc: Document, lines: Sequence[tuple[str, str]]) -> Document:
    """A refreshed screen across targets with what each target said (a failure, a standby's
    notice) first, where one run of the command puts it on stderr: above the table, which
    gives up rows to a short terminal, never these lines."""
    if not lines:
        return doc
    found = [{"target": target, "line": line} for target, line in lines]
    section = Section("what the targets said", found, ["target", "line"], TARGET_LINES_VIEW)
    return Document(doc.payload, [section, *doc.sections])


def across_targets(doc: Document) -> Document:
    """A document whose rows each carry their ``target``: it is every table's first column."""
    import dataclasses

    return dataclasses.replace(
        doc,
        sections=[
            dataclasses.replace(
                section,
                columns=None if section.columns is None else ["target", *section.columns],
                keys=None if section.keys is None else ["target", *section.keys],
                view=None if section.view is None else [TARGET, *section.view],
            )
            for section in doc.sections
        ],
    )


def summary_targets(found: list[shapes.Row]) -> Document:
    """``summary`` across targets: a row per target and the total."""
    return table(found, found, None, SUMMARY_TARGETS_VIEW)
