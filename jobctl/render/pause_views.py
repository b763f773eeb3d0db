"""How pauses read (``jobctl pause``): the columns of the list of pauses (``pause --list``),
the cell of the BECAME column of events that names the kind or queue a pause was of,
summary's section and the line under ``stuck`` — each of the rows of ``ops.pause.waiting``
(the block ``pause_waiting``). Every text from the database made safe first (safe_text).
Pure (layer 0)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from jobctl.contract import safe_text
from jobctl.contract.shapes import Row
from jobctl.render import rows
from jobctl.render.screen import Column, seconds


def became(row: Any) -> str | None:
    """What an event made of its job (its new status); of a pause or resume, which kind or
    queue (an event of no job: its kind or queue column says which)."""
    if row.get("id") is None and row.get("event") in ("paused", "resumed"):
        for design in ("kind", "queue"):
            if row.get(design) is not None:
                return f"{design} {row[design]}"
    status: str | None = row.get("to_status")
    return status


# what a pause's claims since it began read as, where the database holds them not all: the
# history records no worker attempt (--history audit, or none)
UNSEEN = "not seen"
# why a claim of a paused kind happens: the claim jobctl gives workers passes it over
IGNORED_BY = (
    "some workers do not read pauses (an older lease.Worker, one started before "
    "schema apply, or a claim of their own)"
)


def claims_cell(row: Any) -> str | int:
    """A pause's claims since it began (the block claims_since_pause), or ``UNSEEN`` where the
    history keeps none of the ended attempts."""
    since = row.get("claims_since")
    return UNSEEN if since is None else int(since)


def claims_line(pause: Row) -> str | None:
    """What a pause's claims since it began say (none when there are none to say): how many
    and why, or that they cannot be seen. The one sentence pause --list, stuck, report and
    summary say under their rows."""
    what = f"{pause['dimension']} {safe_text.visible(str(pause['value']))}"
    since, running = pause.get("claims_since"), int(pause.get("claims_running") or 0)
    if since is None:
        now = f"; {running} running now were claimed after it ({IGNORED_BY})" if running else ""
        return (
            f"claims of {what} since the pause cannot be seen: the history records no "
            f"worker attempt (--history audit, or no history){now}"
        )
    if not since:
        return None
    unseen = (
        " (claims that completed are not counted: --history transitions does not record "
        "them; late does)"
        if pause.get("claims_seen") == "not_completed"
        else ""
    )
    return f"{int(since)} claim(s) of {what} since the pause: {IGNORED_BY}{unseen}"


def claims_lines(pauses: Sequence[Row]) -> list[str]:
    """``claims_line`` of each pause that has one."""
    return [said for p in pauses if (said := claims_line(p)) is not None]


# jobctl pause --list: what is paused and for how long first, then who and why
PAUSE_VIEW = [
    Column("dimension", "PAUSED", whole=True),
    Column("value", "WHAT"),
    Column("paused_s", "FOR", kind="seconds"),
    Column("actor", "BY"),
    Column("reason", "REASON"),
    Column("waiting", "WAITING", kind="count", priority=1),
    Column("claims_since", "CLAIMED SINCE", priority=1, value=claims_cell),
    Column("db_role", "ROLE", priority=3),
    Column("paused_at", "SINCE", kind="time", priority=2),
]


# every key of a pause's row (the block pause_waiting) and of a pause's event (the block
# pause_events_listed), in JSON's order: -o csv/tsv's header, with no row as with many (the
# columns pause --list shows: the same keys)
PAUSE_KEYS = rows.PAUSE_COLUMNS
PAUSE_EVENT_KEYS = ["at", "dimension", "value", "event", "actor", "db_role", "reason"]
# what pause and resume did (-o json and the others: none when nothing changed)
OUTCOME_KEYS = ["dimension", "value", "event", "reason", "actor", "db_role", "at", "changed"]

# summary's section, and pause --list's columns in JSON's order
SUMMARY_COLUMNS = [
    "dimension",
    "value",
    "waiting",
    "paused_s",
    "actor",
    "reason",
    "claims_running",
    "claims_since",
    "claims_seen",
]

SUMMARY_VIEW = [
    Column("value", "PAUSED", whole=True, value=lambda r: f"{r['dimension']} {r['value']}"),
    Column("waiting", "WAITING", kind="count"),
    Column("claims_since", "CLAIMED SINCE", value=claims_cell),
    Column("paused_s", "FOR", kind="seconds"),
    Column("actor", "BY", priority=1),
    Column("reason", "REASON", priority=2),
]

SUMMARY_TITLE = "paused (their queued jobs wait; jobctl resume to lift)"


def line(pause: Row) -> str:
    """One pause in a sentence: what, for how long, by whom and why, and what waits."""
    what = f"{pause['dimension']} {safe_text.visible(str(pause['value']))}"
    who = safe_text.visible(str(pause.get("actor") or pause.get("db_role") or "?"))
    why = safe_text.visible(str(pause.get("reason") or ""))
    waiting = int(pause.get("waiting") or 0)
    # the value quoted for a shell, then made visible: what is pasted lifts this pause only
    resume = safe_text.visible(f"--{pause['dimension']}={shlex.quote(str(pause['value']))}")
    claims = claims_line(pause)
    return (
        f"{what} is paused ({seconds(pause.get('paused_s'))} by {who}: {why}): "
        f"{waiting} queued job(s) of it wait, and reclaim requeues its expired jobs to wait too; "
        f"jobctl resume {resume} lifts it" + (f"; {claims}" if claims else "")
    )


def lines(pauses: Sequence[Row]) -> list[str]:
    """What ``stuck`` says under its list (stderr) while some kind or queue is paused."""
    return [line(p) for p in pauses]
