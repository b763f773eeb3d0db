"""How pauses read on a terminal: the columns of the list of pauses (``pause --list``), and
the cell of the BECAME column of events that names the kind or queue a pause was of."""

from __future__ import annotations

from typing import Any

from jobctl.render.screen import Column


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
