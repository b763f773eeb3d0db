"""``jobctl report``: an incident on one page, for the postmortem — what expired (when, by
worker), what reclaim did, what people did (who, what, why), what still waits for review,
and the queue latency over the window where the history can tell it.

``collect`` reads it all in one read-only transaction (the history's event-time and job
indexes, the jobs table's primary key); ``markdown`` writes the page, pure. Example::

    with s.transaction(read_only=True):
        page = report.markdown(report.collect(s, events.Window(since=dt.timedelta(hours=2))))
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from typing import Any

from jobctl.db.session import Session
from jobctl.ops import events
from jobctl.ops import review as awaiting
from jobctl.render import output
from jobctl.render.rows import Row

LISTED = 20  # rows named one by one in a section; the rest counted by the server


def _listed(found: list[Row], total: str) -> tuple[list[Row], int]:
    """A bounded query's rows without its ``total`` column, and that total (how many rows
    there are in all, counted by the server: the same on every row)."""
    count = int(found[0][total]) if found else 0
    return [{k: v for k, v in r.items() if not k.startswith("all_")} for r in found], count


def collect(s: Session, window: events.Window) -> Row:
    """The incident in ``window`` as data (the JSON of ``report -o json``); the caller
    holds a read-only transaction. Counted and grouped by the server; each list holds at
    most ``LISTED`` rows, with how many there are in all beside it."""
    params = {**window.params(), "job_table": s.table.qualified, "listed": LISTED}
    bounds = s.one("report_bounds", params)
    expired_rows = s.rows("report_expired", params)
    expired, workers = _listed(expired_rows, "all_workers")
    first = expired_rows[0] if expired_rows else {}
    others_rows = s.rows("report_not_jobctl", params)
    others, roles = _listed(others_rows, "all_roles")
    reclaims, reclaim_groups = _listed(s.rows("report_reclaims", params), "all_groups")
    repeats, repeated = _listed(s.rows("report_repeats", params), "all_jobs")
    people, people_groups = _listed(s.rows("report_people", params), "all_groups")
    by_why = {r["why"]: int(r["jobs"]) for r in s.rows("report_review")}
    oldest = list(awaiting.awaiting(s, awaiting.ReviewFilter(), LISTED)) if by_why else []
    leases = s.one("metrics_leases", {"soon": dt.timedelta(0)})
    return {
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
        "reclaims": reclaims,
        "reclaim_groups": reclaim_groups,
        "reclaimed_repeatedly": repeats,
        "reclaimed_repeatedly_jobs": repeated,
        "people": people,
        "people_groups": people_groups,
        "awaiting_review": {"jobs": sum(by_why.values()), "by_why": by_why, "oldest": oldest},
        "latency": s.one("report_latency", params) | s.one("queue_ready"),
        "parked": s.table.mapping.parked,
        "queued": s.table.mapping.status("queued"),
    }


# ---------------------------------------------------------------- the page
# Text from rows (workers, actors, reasons, statuses, text ids, the table's name) reaches the
# page only as code spans (output.markdown_code): nothing in it is read as Markdown or HTML,
# and it reads as a value quoted, never as the report's own words. Times and numbers are
# jobctl's own text; commands are code spans too.
class Rendered(str):
    """Markdown the page made itself, safe as it is (a time span, an outcome, a list of ids):
    not quoted again."""


def _text(value: Any) -> str:
    """A value in a Markdown table's cell: times to the second, seconds as durations, text
    from rows as a code span (pipes escaped for the table)."""
    if isinstance(value, Rendered):
        return value
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, float):
        return _seconds(value)
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    return output.markdown_cell(value)


def _said(value: Any) -> str:
    """A value from a row inside a sentence: a code span (no table around it)."""
    if value is None or isinstance(value, int | float | dt.datetime):
        return _text(value)
    return output.markdown_code(str(value), in_table=False)


def _word(value: Any) -> Any:
    """One of jobctl's own words (an event's kind, why a job waits) as it is; anything else
    from a row a code span as usual."""
    return Rendered(value) if isinstance(value, str) and _WORD.fullmatch(value) else value


_WORD = re.compile("[a-z_]+")


def _command(text: str) -> str:
    return output.markdown_code(text, in_table=False)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _span(first: Any, last: Any) -> Rendered:
    """When something happened: one time, or from the first to the last."""
    a, b = _text(first), _text(last)
    return Rendered(a if a == b else f"{a} to {b}")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_text(v) for v in row) + " |" for row in rows]
    return lines


def _more(shown: int, total: int, what: str, where: str) -> list[str]:
    """A line saying how many rows the section does not name, and where they all are."""
    if total <= shown:
        return []
    return ["", f"... and {total - shown} more {what} not listed: {_command(where)} has them all."]


def _became(to_status: str | None, report: Row) -> Rendered:
    if to_status == report["queued"]:
        return Rendered("requeued")
    if to_status == report["parked"] and report["parked"] != "failed":
        return Rendered(f"parked in {_text(to_status)}")
    return Rendered("failed" if to_status == "failed" else f"became {_text(to_status)}")


def markdown(report: Row) -> str:
    """The incident as one page of Markdown, to paste into an incident document."""
    since, until = _text(report["since"]) or "the history's start", _text(report["until"])
    window = " ".join(
        f"--{name} {report[name].isoformat()}" for name in ("since", "until") if report[name]
    )
    out = [
        f"# Incident report: {_said(report['table'])}",
        "",
        f"From {since} to {until} (database time), from jobctl's history.",
        "",
        "## What expired",
        "",
    ]
    expired, totals = report["expired"], report["expired_totals"]
    if expired:
        out.append(
            f"{totals['jobs']} job(s) had their lease expire and jobctl reclaimed them, by worker:"
        )
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
        out += _more(
            len(expired),
            totals["workers"],
            "worker(s)",
            f"jobctl events --event reclaimed {window}",
        )
    else:
        out.append("No lease expired and was reclaimed by jobctl in the window.")
    others = report["not_jobctl_reclaims"]
    if others["changes"]:
        roles = ", ".join(
            f"{_said(r['db_role'])} ({r['changes']} change(s) of {r['jobs']} job(s)"
            + (f", {r['live_leases']} of a live lease" if r["live_leases"] else "")
            + ")"
            for r in others["roles"]
        )
        more = others["all_roles"] - len(others["roles"])
        out += [
            "",
            f"Not counted: {others['changes']} change(s) the history records as reclaimed "
            f"that are not jobctl's reclaim of an expired lease, by role {roles}"
            + (f" and {more} more role(s)" if more > 0 else "")
            + f": {_command('jobctl events --event reclaimed ' + window)} shows them.",
        ]
    if report["still_expired"]:
        out += [
            "",
            f"Now: {report['still_expired']} expired lease(s) not reclaimed yet "
            f"({_command('jobctl stuck')} lists them).",
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
        out += _more(
            len(report["reclaims"]), report["reclaim_groups"], "group(s)", "jobctl report -o json"
        )
        repeats = report["reclaimed_repeatedly"]
        out.append("")
        if repeats:
            named = "; ".join(
                f"{_said(r['id'])} ({r['reclaims']} times: {_said(r['workers'])})" for r in repeats
            )
            more = report["reclaimed_repeatedly_jobs"] - len(repeats)
            tail = f"; and {more} more job(s)" if more > 0 else ""
            out.append(f"Reclaimed more than once: {named}{tail}.")
        else:
            out.append("No job was reclaimed more than once.")
    else:
        out.append("jobctl's reclaim did nothing in the window.")

    out += ["", "## What people did", ""]
    if report["people"]:
        out += _table(
            ["who", "did", "jobs", "why", "ids", "when"],
            (
                [
                    r["actor"],
                    _word(r["event"]),
                    r["jobs"],
                    r["reason"],
                    _ids(r),
                    _span(r["first_at"], r["last_at"]),
                ]
                for r in report["people"]
            ),
        )
        out += _more(
            len(report["people"]),
            report["people_groups"],
            "group(s)",
            "jobctl events --event requeued --event manually_failed " + window,
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
                [r["id"], _word(r["why"]), r["last_worker"], r["reclaimed_at"], r["waited_s"]]
                for r in review["oldest"]
            ),
        )
        out += _more(len(review["oldest"]), review["jobs"], "job(s)", "jobctl review -o jsonl")
        out += [
            "",
            f"Decide with: {_command('jobctl review --save-plan p.json')}, then "
            f"{_command('jobctl requeue --plan p.json')} or "
            f"{_command('jobctl fail --plan p.json --reason ...')}.",
        ]
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


def _ids(group: Row) -> Rendered:
    """A group's first ids, and ... when it has more."""
    ids = [_text(i) for i in group["ids"] or []]
    return Rendered(", ".join(ids + (["..."] if group["jobs"] > len(ids) else [])))
