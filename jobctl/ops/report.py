"""``jobctl report``: an incident on one page, for the postmortem — what expired (when, by
worker), what reclaim did, what people did (who, what, why), the kinds and queues paused,
what still waits for review, and the queue latency over the window where the history can
tell it.

``collect`` reads it all in one read-only transaction (the history's event-time and job
indexes, the jobs table's primary key); ``render.markdown`` writes the page. Example::

    with s.transaction(read_only=True):
        found = report.collect(s, events.Window(since=dt.timedelta(hours=2)))
    page = markdown.report(found)
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from psycopg import sql

from jobctl.contract.shapes import IncidentReport, PausesSeen, Row
from jobctl.db.session import Session
from jobctl.ops import events, pause, triage
from jobctl.ops import review as awaiting
from jobctl.sql import queries

LISTED = 20  # rows named one by one in a section; the rest counted by the server


def _listed(found: list[Row], total: str) -> tuple[list[Row], int]:
    """A bounded query's rows without its ``total`` column, and that total (how many rows
    there are in all, counted by the server: the same on every row)."""
    count = int(found[0][total]) if found else 0
    return [{k: v for k, v in r.items() if not k.startswith("all_")} for r in found], count


def _pauses(s: Session, params: dict[str, Any]) -> PausesSeen:
    """The kinds and queues paused now, and the pauses and resumes in the window (oldest
    first, at most LISTED): none before history 010."""
    if not s.table.pauses:
        return {"now": [], "events": []}
    shown = {**triage.shown_texts("e", "actor", "reason", "value"), "order": sql.SQL("")}
    found = s.rows("pause_events_listed", {**params, "limit": LISTED}, **shown)
    return {"now": pause.waiting(s), "events": found}


def collect(s: Session, window: events.Window) -> IncidentReport:
    """The incident in ``window`` as data (the JSON of ``report -o json``); the caller
    holds a read-only transaction. Counted and grouped by the server; each list holds at
    most ``LISTED`` rows, with how many there are in all beside it."""
    window.what.check(s.table.mapping)  # --kind on a table that maps none: exit 2
    params = {
        **window.params(),
        "job_table": s.table.qualified,
        "listed": LISTED,
        "cut": triage.DISPLAY_CHARS,  # the texts of rows and roles, as a display shows them
    }
    texts = triage.shown_texts("e", "worker", "actor", "reason", kept=s.table.kept_texts)
    bounds = s.one("report_bounds", params)
    expired_rows = s.rows("report_expired", params, **texts)
    expired, workers = _listed(expired_rows, "all_workers")
    first = expired_rows[0] if expired_rows else {}
    others_rows = s.rows("report_not_jobctl", params)
    others, roles = _listed(others_rows, "all_roles")
    reclaims, reclaim_groups = _listed(s.rows("report_reclaims", params, **texts), "all_groups")
    repeats, repeated = _listed(s.rows("report_repeats", params, **texts), "all_jobs")
    people, people_groups = _listed(s.rows("report_people", params, **texts), "all_groups")
    narrowed = window.what.params()
    by_why = {r["why"]: int(r["jobs"]) for r in s.rows("report_review", narrowed)}
    waiting = awaiting.ReviewFilter(what=window.what)
    oldest = list(awaiting.awaiting(s, waiting, LISTED)) if by_why else []
    leases = s.one("metrics_leases", {"soon": dt.timedelta(0), **narrowed})
    found = {
        "table": s.table.qualified,
        "since": bounds["since"],
        "until": bounds["until"],
        "expired": expired,
        "expired_totals": {
            "workers": workers,
            "jobs": int(first.get("all_jobs") or 0),
            "reclaims": int(first.get("all_reclaims") or 0),
        },
        "not_jobctl_reclaims": {
            "roles": others,
            "all_roles": roles,
            "changes": int(others_rows[0]["all_changes"]) if others_rows else 0,
        },
        "still_expired": leases["stuck_auto"] + leases["stuck_manual"],
        "no_lease": leases["no_lease"],
        "reclaims": reclaims,
        "reclaim_groups": reclaim_groups,
        "reclaimed_repeatedly": repeats,
        "reclaimed_repeatedly_jobs": repeated,
        "people": people,
        "people_groups": people_groups,
        "awaiting_review": {"jobs": sum(by_why.values()), "by_why": by_why, "oldest": oldest},
        "latency": s.one("report_latency", params) | s.one("queue_ready", window.what.params()),
        "parked": s.table.mapping.parked,
        "queued": s.table.mapping.status("queued"),
        "pauses": _pauses(s, params),
    }
    for by in s.table.mapping.mapped_optional:  # kind, queue: when the table maps them
        key = s.table.fragments[f"{by}_value"]
        shown = queries.query("display_text", text=sql.Identifier("g", "grp"))
        found_groups = s.rows("report_by_group", params, group_key=key, shown_group=shown)
        grouped = [{by: r.pop("grp"), **r} for r in found_groups]
        found[f"by_{by}"], found[f"by_{by}_groups"] = _listed(grouped, "all_groups")
    return cast(IncidentReport, found)
