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
from jobctl.render.screen import Column, seconds


def became(row: Any) -> Any:
    """What an event made of its job (its new status); of a pause or resume, which kind or
    queue (an event of no job: its kind or queue column says which)."""
    if row.get("id") is None and row.get("event") in ("paused", "resumed"):
        for design in ("kind", "queue"):
            if row.get(design) is not None:
                return f"{design} {row[design]}"
    return row.get("to_status")


# jobctl pause --list: what is paused and for how long first, then who and why
PAUSE_VIEW = [
    Column("dimension", "PAUSED", whole=True),
    Column("value", "WHAT"),
    Column("paused_s", "FOR", kind="seconds"),
    Column("actor", "BY"),
    Column("reason", "REASON"),
    Column("db_role", "ROLE", priority=3),
    Column("paused_at", "SINCE", kind="time", priority=2),
]


# every key of a pause's row (the block pause_waiting) and of a pause's event (the block
# pause_events_listed), in JSON's order: -o csv/tsv's header, with no row as with many
PAUSE_KEYS = [
    "dimension",
    "value",
    "reason",
    "actor",
    "db_role",
    "paused_at",
    "paused_s",
    "waiting",
]
PAUSE_EVENT_KEYS = ["at", "dimension", "value", "event", "actor", "db_role", "reason"]
# what pause and resume did (-o json and the others: none when nothing changed)
OUTCOME_KEYS = ["dimension", "value", "event", "reason", "actor", "db_role", "at", "changed"]

# summary's section, and pause --list's columns in JSON's order
SUMMARY_COLUMNS = ["dimension", "value", "waiting", "paused_s", "actor", "reason"]

SUMMARY_VIEW = [
    Column("value", "PAUSED", whole=True, value=lambda r: f"{r['dimension']} {r['value']}"),
    Column("waiting", "WAITING", kind="count"),
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
    return (
        f"{what} is paused ({seconds(pause.get('paused_s'))} by {who}: {why}): "
        f"{waiting} queued job(s) of it wait, and reclaim requeues its expired jobs to wait too; "
        f"jobctl resume {resume} lifts it"
    )


def lines(pauses: Sequence[Row]) -> list[str]:
    """What ``stuck`` says under its list (stderr) while some kind or queue is paused."""
    return [line(p) for p in pauses]
