"""What ``jobctl top`` shows, as ``rich.text.Text`` (never markup: a worker named
``[bold red]x[/]`` is those characters), every value from a row made safe first
(``safe_text.visible``): the views' columns and cells, the filter, the summary strip, a
job's detail, the confirmation of a write and its outcome. No Textual here: pure, tested
without a terminal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text

from jobctl.contract import safe_text
from jobctl.render import judgements, screen

if TYPE_CHECKING:
    from jobctl.contract.shapes import Row
    from jobctl.ops.console import Snapshot

STUCK, REVIEW, SUMMARY = "stuck", "review", "summary"
VIEWS = (STUCK, REVIEW, SUMMARY)
ERROR_CHARS = 200  # an error in a cell: its start (the detail shows it whole)
KEYS = (
    "↑↓/jk move  1 stuck 2 review 3 summary  / filter  enter detail  space mark\n"
    "r requeue  f fail  p plan  esc close/clear  ? help  q quit"
)
# the help screen (``?``): each key and what it does; the writes' keys say when they write
HELP = (
    ("↑ ↓  j k", "move the cursor"),
    ("1  2  3", "view stuck jobs, jobs awaiting review, the summary"),
    ("/", "filter rows by id, worker, error...; enter applies it"),
    ("esc", "clear the filter; close a screen"),
    ("enter", "the job's detail: attempts, tokens, events, explain"),
    ("space", "mark the job: r, f, p act on the marked, else the current"),
    ("r", "requeue: a reason, the rows shown, y writes (fenced, audited)"),
    ("f", "fail: a reason (its last_error), the rows shown, y writes"),
    ("p", "save the jobs as a plan (jobctl requeue --plan applies it)"),
    ("? F1", "this help"),
    ("q  ctrl-c", "quit (exit 0; ctrl-c: 130)"),
)


def safe(value: Any) -> str:
    """A value from a row as one visible line: escapes and controls shown, not obeyed."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return screen.short_time(value)
    return safe_text.visible(str(value))


def plain(text: str, style: str = "") -> Text:
    """``text`` as it is: a ``Text`` that no markup in it can restyle."""
    return Text(safe_text.visible(text), style=style, no_wrap=True)


@dataclasses.dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[Row], str]
    style: Callable[[Row], str] | None = None


def _overdue(row: Row) -> str:
    value = row.get("lease_overdue_s")
    if value is None:  # no lease: how long ago it was claimed
        claimed = row.get("claimed_age_s")
        return "" if claimed is None else f"claimed {screen.seconds(claimed)} ago"
    return f"{screen.seconds(value)} ago" if value >= 0 else f"in {screen.seconds(-value)}"


def _attempts(row: Row) -> str:
    return f"{row.get('attempts', '')}/{row.get('max_attempts', '')}"


def _state_style(row: Row) -> str:
    state = row.get("lease_state")
    return {"expired": "bold red", "none": "magenta"}.get(str(state), "yellow")


def _why(row: Row) -> str:
    return safe(judgements.why(row, short=True))


COLUMNS: dict[str, list[Column]] = {
    STUCK: [
        Column("id", lambda r: safe(r["id"])),
        Column("worker", lambda r: safe(r.get("reserved_by"))),
        Column("lease", lambda r: safe(r.get("lease_state") or "expired"), _state_style),
        Column("expiry", _overdue),
        Column("att", _attempts),
        Column("policy", lambda r: safe(judgements.policy(r))),
        Column("action", lambda r: safe(r.get("action")) + (" (skip)" if r.get("skipped") else "")),
    ],
    REVIEW: [
        Column("id", lambda r: safe(r["id"])),
        Column("why", _why),
        Column("last worker", lambda r: safe(r.get("last_worker"))),
        Column("waited", lambda r: screen.seconds(r.get("waited_s"))),
        Column("att", _attempts),
        Column("error", lambda r: safe((r.get("last_error") or "")[:ERROR_CHARS])),
    ],
}
# the fields the filter matches, when a row has them (kind, queue: a table's own columns)
FILTERED = (
    "id",
    "reserved_by",
    "last_worker",
    "last_error",
    "skipped",
    "status",
    "why",
    "recovery_policy",
    "kind",
    "queue",
)


def matches(row: Row, needle: str) -> bool:
    """Whether the filter ``needle`` is in the row's id, worker, error, ... (any case)."""
    if not needle:
        return True
    wanted = needle.casefold()
    return any(wanted in str(row[k]).casefold() for k in FILTERED if row.get(k) is not None)


def key(row: Row) -> str:
    """The job a row is, across refreshes and views: its id (and its target, across several)."""
    target = row.get("target")
    return str(row["id"]) if target is None else f"{target}/{row['id']}"


def cells(view: str, row: Row, marked: bool) -> list[Text]:
    """One row's cells in ``view``, its mark first (then its target, across several)."""
    out = [plain("*" if marked else " ", "bold magenta")]
    if "target" in row:
        out.append(plain(safe(row["target"]), "cyan"))
    for column in COLUMNS[view]:
        out.append(plain(column.cell(row), column.style(row) if column.style else ""))
    return out


def headers(view: str, targets: bool = False) -> list[Text]:
    first = [plain(" "), plain("target", "bold")] if targets else [plain(" ")]
    return [*first, *(plain(c.header, "bold") for c in COLUMNS[view])]


def message(line: str) -> Text:
    """The line under the rows: made safe, wrapped at words (never cut at the width)."""
    return Text(safe_text.visible(line), overflow="fold")


def help_text(*, writes: bool) -> Text:
    """The help screen: every key and what it does, and whether r and f write here."""
    text = Text()
    text.append("jobctl top: keys\n\n", style="bold")
    for keys, does in HELP:
        text.append(f"  {keys:<10}", style="bold")
        text.append(f" {does}\n")
    text.append("\n")
    if writes:
        text.append("WRITES ALLOWED", style="bold red")
        text.append(": r and f write after y; a row changed since the screen\n")
        text.append("read it is a conflict, not written.\n")
    else:
        text.append("read-only", style="green")
        text.append(": r and f write nothing; jobctl top --allow-writes writes.\n")
    text.append("A lost database is reconnected with backoff; the strip says so, and\n")
    text.append("its figures stay, as of the time it shows, until it answers.\n")
    text.append("\nesc closes", style="dim")
    return text


def strip(
    snap: Snapshot | None,
    *,
    writes: bool,
    every: dt.timedelta,
    where: str,
    lost: Sequence[str] = (),
) -> Text:
    """The summary strip: the counts, the oldest ready job, the server, the mode; while a
    database is lost, its reconnection (``lost``) before the time of the figures shown; a
    third line while a kind or queue is paused (``jobctl pause``)."""
    if snap is None:
        if lost:
            return plain(f"reconnecting ({'; '.join(lost)})", "bold red")
        return plain("reading…")
    parts = [
        (f"expired {snap.expired}", "bold red" if snap.expired else "green"),
        (f"expiring {snap.expiring}", "yellow" if snap.expiring else ""),
        *([(f"no lease {snap.no_lease}", "magenta")] if snap.no_lease else []),
        (f"review {snap.awaiting_review}", "bold" if snap.awaiting_review else ""),
        (f"ready {snap.ready}", ""),
    ]
    if snap.oldest_ready_s is not None:
        parts.append((f"oldest ready {screen.seconds(snap.oldest_ready_s)}", ""))
    text = Text(no_wrap=True, overflow="ellipsis")
    for n, (part, style) in enumerate(parts):
        if n:
            text.append(" · ")
        text.append(part, style=style)
    text.append("\n")  # the mode first: a long server name is what gets cut
    text.append("WRITES ALLOWED" if writes else "read-only", "bold red" if writes else "green")
    if lost:  # the figures are stale: how stale, and when the next try is
        text.append(" · ")
        text.append(f"reconnecting ({'; '.join(safe(line) for line in lost)})", "bold red")
        text.append(f" · as of {snap.read_at.astimezone():%H:%M:%S} · ")
    else:
        text.append(f" · {snap.read_at.astimezone():%H:%M:%S} every {screen.seconds(every)} · ")
    text.append(safe(where))
    if snap.pauses:  # a third line: the claim of these kinds or queues is stopped
        text.append("\n")
        text.append("paused: ", "bold yellow")
        text.append(" · ".join(paused(p) for p in snap.pauses), "yellow")
    return text


def paused(row: Row) -> str:
    """A pause as the strip says it: ``kind charge_card (1h2m, 40 waiting)``, its target
    first across targets."""
    where = f"{safe(row['target'])} " if row.get("target") else ""
    age = screen.seconds(row.get("paused_s") or 0.0)
    return f"{where}{row['dimension']} {safe(row['value'])} ({age}, {row['waiting']} waiting)"


def counted(view: str, snap: Snapshot | None, shown: int, needle: str) -> str:
    """The line under a view: how many rows it shows, and how many more there are."""
    if snap is None:
        return ""
    total = snap.expired + snap.expiring + snap.no_lease if view == STUCK else snap.awaiting_review
    more = snap.more_stuck if view == STUCK else snap.more_review
    read = len(snap.stuck if view == STUCK else snap.review)
    line = f"{shown} of {total} shown" if needle else f"{read} of {total}"
    if needle:
        line += f" (filter {safe(needle)!s})"
    if more:
        line += f"; {more} more not read (the first {read} are)"
    return line


def summary(snap: Snapshot | None) -> Text:
    """View 3: counts by status, processing by lease state, the workers (of each target)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if snap is None or not snap.summaries:
        text.append("reading…")
        return text
    for target, found in snap.summaries:
        if target is not None:
            text.append(f"target {safe(target)}\n", style="bold cyan")
        _summary(text, found)
    return text


def _summary(text: Text, found: Row) -> None:
    text.append("jobs by status\n", style="bold")
    for status, count in found["status"].items():
        mark = " (estimated)" if status in found.get("estimated", []) else ""
        text.append(f"  {safe(status):<14} {count}{mark}\n")
    processing = found["processing"]
    text.append("processing\n", style="bold")
    for key in ("live", "expiring_soon", "expired", "no_lease"):
        if key in processing:
            text.append(f"  {key:<14} {processing[key]}\n")
    text.append("workers\n", style="bold")
    text.append(f"  {'worker':<30} {'proc':>5} {'expired':>7} {'soon':>5} {'lag':>7}\n")
    for worker in found["workers"]:
        lag = screen.seconds(worker.get("heartbeat_lag_s"))
        text.append(
            f"  {screen.cut(safe(worker['worker']), 30):<30} {worker['processing']:>5} "
            f"{worker['expired']:>7} {worker['expiring_soon']:>5} {lag:>7}\n"
        )


def detail(job_id: Any, found: Row, told: Sequence[str], target: str | None = None) -> Text:
    """A job's detail: the row, its attempts (tokens whole), its events, explain's story."""
    job = found["job"]
    text = Text()
    text.append(f"job {safe(job_id)}" + (f" on {safe(target)}" if target else "") + "\n", "bold")
    for key in ("status", "lease_state", "recovery_policy", "attempts", "max_attempts"):
        if key in job:
            text.append(f"  {key:<16} {safe(job[key])}\n")
    for key in ("reserved_by", "attempt_token", "lease_expires_at", "heartbeat_at"):
        if job.get(key) is not None:
            text.append(f"  {key:<16} {safe(job[key])}\n")
    if job.get("last_error"):
        text.append(f"  {'last_error':<16} {safe(job['last_error'])}\n")
    text.append("\nattempts\n", style="bold")
    for a in found["attempts"]:
        text.append(
            f"  #{safe(a.get('attempt'))} {safe(a.get('worker'))}  "
            f"claimed {safe(a.get('claimed_at'))}  ended {safe(a.get('ended_at')) or '-'}  "
            f"{safe(a.get('outcome'))}\n"
        )
        text.append(f"     token {safe(a.get('attempt_token'))}\n", style="cyan")
    text.append("\nevents\n", style="bold")
    for e in found["events"]:
        who = f" by {safe(e.get('actor'))}" if e.get("actor") else ""
        why = f": {safe(e.get('reason'))}" if e.get("reason") else ""
        text.append(
            f"  {safe(e.get('at'))} {safe(e.get('event'))} {safe(e.get('from_status'))}"
            f"->{safe(e.get('to_status'))}{who}{why}\n"
        )
    text.append("\nexplain\n", style="bold")
    for sentence in told:
        text.append(f"  {safe(sentence)}\n")
    text.append("\nesc closes", style="dim")
    return text


def confirmation(action: str, rows: Sequence[Row], reason: str, target: str) -> Text:
    """What a write is about to do, row by row, and how to go or cancel."""
    to = "queued" if action == "requeue" else "failed"
    text = Text()
    text.append(f"{action} {len(rows)} job(s) on {safe(target)}", style="bold")
    text.append(", each fenced on the row as this screen read it:\n")
    for row in rows:
        worker = row.get("reserved_by") or row.get("last_worker")
        on = f"{safe(row['target'])}/" if row.get("target") else ""
        text.append(
            f"  {on}{safe(row['id'])}  {safe(row.get('status'))} -> {to}  "
            f"worker {safe(worker) or '-'}  token {safe(row.get('attempt_token')) or '-'}\n"
        )
    text.append(f"reason: {safe(reason) or '(none)'}\n")
    text.append("audited with the actor and reason; a row changed since: conflict, not written\n")
    text.append("y goes, any other key cancels", style="bold")
    return text


def outcome(action: str, results: Iterable[Row]) -> tuple[Text, str]:
    """The write's outcome per row, and one line for the status bar."""
    text = Text()
    text.append(f"{action}: outcome per job\n", style="bold")
    counts: dict[str, int] = {}
    for r in results:
        kind = str(r["outcome"])
        counts[kind] = counts.get(kind, 0) + 1
        style = "green" if kind in ("requeued", "failed") else "bold red"
        on = f"{safe(r['target'])}/" if r.get("target") else ""
        text.append(f"  {on}{safe(r['id'])}  ", style="bold")
        text.append(kind, style=style)
        text.append(f"  {safe(r.get('detail'))}\n")
    text.append("\nesc closes", style="dim")
    return text, ", ".join(f"{n} {kind}" for kind, n in counts.items())
