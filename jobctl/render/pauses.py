"""The pauses of a table as every view shows them (``jobctl pause``): summary's section, the
line under ``stuck``, report's lines. Each reads the rows of ``ops.pause.waiting`` (the block
``pause_waiting``): dimension, value, reason, actor, paused_s, waiting. Every text from the
database made safe first (safe_text). Pure (layer 0)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from jobctl.render import safe_text
from jobctl.render.rows import Row
from jobctl.render.screen import Column, seconds

# summary's section, and pause --list's columns in JSON's order
COLUMNS = ["dimension", "value", "waiting", "paused_s", "actor", "reason"]

VIEW = [
    Column("value", "PAUSED", whole=True, value=lambda r: f"{r['dimension']} {r['value']}"),
    Column("waiting", "WAITING", kind="count"),
    Column("paused_s", "FOR", kind="seconds"),
    Column("actor", "BY", priority=1),
    Column("reason", "REASON", priority=2),
]

TITLE = "paused (their queued jobs wait; jobctl resume to lift)"


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
