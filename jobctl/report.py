"""``jobctl report``: an incident on one page, for the postmortem — what expired (when, by
worker), what reclaim did, what people did (who, what, why), what still waits for review,
and the queue latency over the window where the history can tell it.

``collect`` reads it all in one read-only transaction (the history's event-time and job
indexes, the jobs table's primary key); ``markdown`` writes the page, pure. Example::

    with s.transaction(read_only=True):
        page = report.markdown(report.collect(s, events.Window(since=dt.timedelta(hours=2))))
"""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from jobctl import events, safe_text
from jobctl import review as awaiting
from jobctl.rows import Row
from jobctl.session import Session

LISTED = 20  # jobs named one by one in a section; the rest counted


def collect(s: Session, window: events.Window) -> Row:
    """The incident in ``window`` as data (the JSON of ``report -o json``); the caller
    holds a read-only transaction."""
    params = {**window.params(), "job_table": s.table.qualified}
    bounds = s.one("report_bounds", params)
    waiting = list(awaiting.awaiting(s, awaiting.ReviewFilter(), None))
    leases = s.one("metrics_leases", {"soon": dt.timedelta(0)})
    return {
        "table": s.table.qualified,
        "since": bounds["since"],
        "until": bounds["until"],
        "expired": s.rows("report_expired", params),
        "still_expired": leases["stuck_auto"] + leases["stuck_manual"],
        "reclaims": s.rows("report_reclaims", params),
        "reclaimed_repeatedly": s.rows("report_repeats", params),
        "people": s.rows("report_people", params),
        "awaiting_review": {
            "jobs": len(waiting),
            "by_why": dict(collections.Counter(r["why"] for r in waiting)),
            "oldest": waiting[:LISTED],
        },
        "latency": s.one("report_latency", params) | s.one("queue_ready"),
        "parked": s.table.mapping.parked,
        "queued": s.table.mapping.status("queued"),
    }


# ---------------------------------------------------------------- the page
def _text(value: Any) -> str:
    """A cell of a Markdown table: stored text made visible (no control or bidi character
    reaches the page raw), pipes escaped, times to the second."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, float):
        return _seconds(value)
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    return safe_text.visible(str(value)).replace("|", "\\|")


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _span(first: Any, last: Any) -> str:
    """When something happened: one time, or from the first to the last."""
    a, b = _text(first), _text(last)
    return a if a == b else f"{a} to {b}"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_text(v) for v in row) + " |" for row in rows]
    return lines


def _became(to_status: str | None, report: Row) -> str:
    if to_status == report["queued"]:
        return "requeued"
    if to_status == report["parked"] and report["parked"] != "failed":
        return f"parked in {_text(to_status)}"
    return "failed" if to_status == "failed" else f"became {_text(to_status)}"


def markdown(report: Row) -> str:
    """The incident as one page of Markdown, to paste into an incident document."""
    since, until = _text(report["since"]) or "the history's start", _text(report["until"])
    out = [
        f"# Incident report: {_text(report['table'])}",
        "",
        f"From {since} to {until} (database time), from jobctl's history.",
        "",
        "## What expired",
        "",
    ]
    expired = report["expired"]
    if expired:
        total = sum(r["jobs"] for r in expired)
        out.append(f"{total} job(s) had their lease expire and reclaimed, by worker:")
        out.append("")
        out += _table(
            ["worker", "jobs", "leases expired", "reclaimed"],
            (
                [
                    r["worker"],
                    r["jobs"],
                    _span(r["first_expiry"], r["last_expiry"]),
                    _span(r["first_reclaim"], r["last_reclaim"]),
                ]
                for r in expired
            ),
        )
    else:
        out.append("No lease expired and was reclaimed in the window.")
    if report["still_expired"]:
        out += [
            "",
            f"Now: {report['still_expired']} expired lease(s) not reclaimed yet "
            "(jobctl stuck lists them).",
        ]

    out += ["", "## What reclaim did", ""]
    if report["reclaims"]:
        out += _table(
            ["run by", "outcome", "reclaims", "jobs", "when"],
            (
                [
                    r["actor"],
                    _became(r["to_status"], report),
                    r["reclaims"],
                    r["jobs"],
                    _span(r["first_at"], r["last_at"]),
                ]
                for r in report["reclaims"]
            ),
        )
        repeats = report["reclaimed_repeatedly"]
        out.append("")
        if repeats:
            named = "; ".join(
                f"{_text(r['id'])} ({r['reclaims']} times: {_text(r['workers'])})" for r in repeats
            )
            out.append(f"Reclaimed more than once: {named}.")
        else:
            out.append("No job was reclaimed more than once.")
    else:
        out.append("Reclaim did nothing in the window.")

    out += ["", "## What people did", ""]
    if report["people"]:
        out += _table(
            ["who", "did", "jobs", "why", "ids", "when"],
            (
                [
                    r["actor"],
                    r["event"],
                    r["jobs"],
                    r["reason"],
                    list(r["ids"] or []) + (["..."] if r["jobs"] > len(r["ids"] or []) else []),
                    _span(r["first_at"], r["last_at"]),
                ]
                for r in report["people"]
            ),
        )
    else:
        out.append("No one requeued, failed or changed the policy of a job in the window.")

    out += ["", "## Still waiting for review", ""]
    review = report["awaiting_review"]
    if review["jobs"]:
        why = ", ".join(f"{n} {w.replace('_', ' ')}" for w, n in sorted(review["by_why"].items()))
        out.append(f"{review['jobs']} job(s) wait for a human ({why}); the longest waiting:")
        out.append("")
        out += _table(
            ["id", "why", "last worker", "reclaimed at", "waited"],
            (
                [r["id"], r["why"], r["last_worker"], r["reclaimed_at"], r["waited_s"]]
                for r in review["oldest"]
            ),
        )
        out += ["", "Decide with: jobctl review --save-plan p.json, then requeue/fail --plan."]
    else:
        out.append("No job waits for review.")

    out += ["", "## Queue latency", ""]
    lat = report["latency"]
    if lat["returned"]:
        out.append(
            f"{lat['returned']} return(s) to the queue (reclaim, requeue, a worker's retry, the "
            f"application): "
            f"{lat['claimed']} claimed again, {lat['waiting']} still waiting"
            + (f" (the longest for {_seconds(lat['longest_waiting_s'])})" if lat["waiting"] else "")
            + (
                f", {lat['unknown']} the history cannot tell (claimed and completed under the "
                "default history, which records no completed attempt)"
                if lat["unknown"]
                else ""
            )
            + "."
        )
        if lat["claimed"]:
            out.append(
                f"Time to the next claim: median {_seconds(lat['p50_s'])}, "
                f"95th percentile {_seconds(lat['p95_s'])}, longest {_seconds(lat['max_s'])}."
            )
    else:
        out.append("No job went back to the queue in the window.")
    ready = lat["ready"]
    oldest = f", the oldest for {_seconds(lat['oldest_ready_s'])}" if ready else ""
    out.append(f"Now: {ready} job(s) ready to run{oldest}.")
    return "\n".join(out) + "\n"
