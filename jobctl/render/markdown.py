"""``jobctl report``'s page: the incident (``ops.report.collect``'s data) as one page of
Markdown, to paste into an incident document. Pure: no database, no printing.

Text from rows (workers, actors, reasons, statuses, text ids, the table's name) reaches the
page only as code spans (``output.markdown_code``): nothing in it is read as Markdown or HTML,
and it reads as a value quoted, never as the report's own words. Times and numbers are
jobctl's own text; commands are code spans too. Example::

    sys.stdout.write(markdown.report(report.collect(s, window)))
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from jobctl import durations
from jobctl.contract.shapes import IncidentReport, PeopleGroup
from jobctl.render import output


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


def _word(value: Any) -> object:
    """One of jobctl's own words (an event's kind, why a job waits) as it is; anything else
    from a row a code span as usual."""
    return Rendered(value) if isinstance(value, str) and _WORD.fullmatch(value) else value


_WORD = re.compile("[a-z_]+")


def _command(text: str) -> str:
    return output.markdown_code(text, in_table=False)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return durations.human(value)


def _span(first: Any, last: Any) -> Rendered:
    """When something happened: one time, or from the first to the last."""
    a, b = _text(first), _text(last)
    return Rendered(a if a == b else f"{a} to {b}")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_text(v) for v in row) + " |" for row in rows]
    return lines


def _more(shown: int, total: int, what: str, listing: str) -> list[str]:
    """A line saying how many rows the section does not name, and the command (``listing``)
    that lists them all."""
    if total <= shown:
        return []
    return [
        "",
        f"... and {total - shown} more {what} not listed: {_command(listing)} has them all.",
    ]


def _became(to_status: str | None, report: IncidentReport) -> Rendered:
    if to_status == report["queued"]:
        return Rendered("requeued")
    if to_status == report["parked"] and report["parked"] != "failed":
        return Rendered(f"parked in {_text(to_status)}")
    return Rendered("failed" if to_status == "failed" else f"became {_text(to_status)}")


def _ids(group: PeopleGroup) -> Rendered:
    """A group's first ids, and ... when it has more."""
    ids = [_text(i) for i in group["ids"] or []]
    return Rendered(", ".join(ids + (["..."] if group["jobs"] > len(ids) else [])))


# ---------------------------------------------------------------- the page
def report(incident: IncidentReport, *, target: str | None = None) -> str:
    """The incident as one page of Markdown, to paste into an incident document: its title
    names the table and ``target`` (the config file's name of the database, if any), each
    sentence is a paragraph of its own, every command a code span."""
    bounds = (("since", incident["since"]), ("until", incident["until"]))
    window = " ".join(f"--{name} {at.isoformat()}" for name, at in bounds if at)
    out = [
        *_title(incident, target),
        *_expired(incident, window),
        *_not_counted(incident, window),
        *_still_expired(incident),
        *_reclaimed(incident),
        *_by_group(incident, "kind"),
        *_by_group(incident, "queue"),
        *_people(incident, window),
        *_paused(incident),
        *_review(incident),
        *_latency(incident),
    ]
    return "\n".join(out) + "\n"


def _title(report: IncidentReport, target: str | None) -> list[str]:
    since, until = _text(report["since"]) or "the history's start", _text(report["until"])
    on = f" on {_said(target)}" if target else ""
    return [
        f"# Incident report: {_said(report['table'])}{on}",
        "",
        f"From {since} to {until} (database time), from jobctl's history.",
    ]


def _expired(report: IncidentReport, window: str) -> list[str]:
    out = ["", "## What expired", ""]
    expired, totals = report["expired"], report["expired_totals"]
    if not expired:
        return [*out, "No lease expired and was reclaimed by jobctl in the window."]
    out.append(f"{totals['jobs']} job(s) whose lease expired were reclaimed by jobctl; by worker:")
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
    return out + _more(
        len(expired),
        totals["workers"],
        "worker(s)",
        f"jobctl events --event reclaimed {window}",
    )


def _not_counted(report: IncidentReport, window: str) -> list[str]:
    """The changes recorded as reclaimed that are not jobctl's reclaim of an expired lease."""
    others = report["not_jobctl_reclaims"]
    if not others["changes"]:
        return []
    roles = ", ".join(
        f"{_said(r['db_role'])} ({r['changes']} change(s) of {r['jobs']} job(s)"
        + (f", {r['live_leases']} of a live lease" if r["live_leases"] else "")
        + ")"
        for r in others["roles"]
    )
    more = others["all_roles"] - len(others["roles"])
    return [
        "",
        f"Not counted: {others['changes']} change(s) the history records as reclaimed "
        f"that are not jobctl's reclaim of an expired lease, by role {roles}"
        + (f" and {more} more role(s)" if more > 0 else "")
        + f": {_command('jobctl events --event reclaimed ' + window)} shows them.",
    ]


def _still_expired(report: IncidentReport) -> list[str]:
    out = []
    if report["still_expired"]:
        out += [
            "",
            f"Now: {report['still_expired']} expired lease(s) not reclaimed yet "
            f"({_command('jobctl stuck')} lists them).",
        ]
    if report.get("no_lease"):
        out += [
            "",
            f"Now: {report['no_lease']} processing job(s) with no lease, claimed by code "
            "that sets none: reclaim never touches them ("
            f"{_command('jobctl stuck')} lists them, {_command('jobctl doctor')} finds the "
            "writer).",
        ]
    return out


def _reclaimed(report: IncidentReport) -> list[str]:
    out = ["", "## What reclaim did", ""]
    if not report["reclaims"]:
        return [*out, "jobctl's reclaim did nothing in the window."]
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
    if not repeats:
        return [*out, "No job was reclaimed more than once."]
    named = "; ".join(
        f"{_said(r['id'])} ({r['reclaims']} times: {_said(r['workers'])})" for r in repeats
    )
    more = report["reclaimed_repeatedly_jobs"] - len(repeats)
    tail = f"; and {more} more job(s)" if more > 0 else ""
    return [*out, f"Reclaimed more than once: {named}{tail}."]


def _by_group(report: IncidentReport, by: str) -> list[str]:
    """What expired, what reclaim made of it and what waits for review, per kind (or queue):
    only when the table maps it."""
    data: dict[str, Any] = dict(report)  # by_kind, by_queue: keys of a mapped table only
    groups: list[Any] | None = data.get(f"by_{by}")
    if groups is None:
        return []
    out = ["", f"## By {by}", ""]
    if not groups:
        return [*out, f"Nothing expired or waits for review, whatever the {by}."]
    out += _table(
        [by, "expired (jobs)", "requeued", f"became {_text(report['parked'])}", "awaiting review"],
        (
            [g[by], g["expired_jobs"], g["requeued"], g["parked"], g["awaiting_review"]]
            for g in groups
        ),
    )
    total = int(data.get(f"by_{by}_groups") or len(groups))
    return out + _more(len(groups), total, f"{by}(s)", "jobctl report -o json")


def _people(report: IncidentReport, window: str) -> list[str]:
    out = ["", "## What people did", ""]
    if not report["people"]:
        return [
            *out,
            "No one requeued, failed, cancelled or changed the policy of a job in the window.",
        ]
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
    return out + _more(
        len(report["people"]),
        report["people_groups"],
        "group(s)",
        "jobctl events --event requeued --event manually_failed --event cancelled " + window,
    )


def _paused(report: IncidentReport) -> list[str]:
    """The kinds and queues paused now and the pauses and resumes of the window; nothing
    when there were none (most incidents)."""
    pauses = report.get("pauses") or {"now": [], "events": []}
    if not pauses["now"] and not pauses["events"]:
        return []
    out = ["", "## Paused kinds and queues", ""]
    for p in pauses["now"]:
        dimension = str(p["dimension"])
        option = f"--{dimension}={shlex.quote(str(p['value']))}"  # pasted: this pause only
        resume = f"jobctl resume {option}"
        out += [
            f"{dimension.capitalize()} {_said(p['value'])} is paused (for "
            f"{_seconds(p['paused_s'])}, by {_said(p['actor'])}: {_said(p['reason'])}): "
            f"{p['waiting']} queued job(s) of it wait. Lift it with "
            f"{_command(resume)}.",
            "",
        ]
    if not pauses["events"]:
        return out[:-1]
    return out + _table(
        ["when", "event", "what", "who", "why"],
        (
            [
                e["at"],
                _word(e["event"]),
                Rendered(f"{e['dimension']} {output.markdown_cell(e['value'])}"),
                e["actor"],
                e["reason"],
            ]
            for e in pauses["events"]
        ),
    )


def _review(report: IncidentReport) -> list[str]:
    out = ["", "## Still waiting for review", ""]
    review = report["awaiting_review"]
    if not review["jobs"]:
        return [*out, "No job waits for review."]
    why = ", ".join(f"{w.replace('_', ' ')}: {n}" for w, n in sorted(review["by_why"].items()))
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
    return [
        *out,
        "",
        f"Decide with: {_command('jobctl review --save-plan p.json')}, then "
        f"{_command('jobctl requeue --plan p.json')} or "
        f"{_command('jobctl fail --plan p.json --reason ...')}.",
    ]


def _latency(report: IncidentReport) -> list[str]:
    out = ["", "## Queue latency", ""]
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
            out.append("")  # each figure a paragraph: plain Markdown joins adjacent lines
            out.append(
                f"Time to the next claim: median {_seconds(lat['p50_s'])}, "
                f"95th percentile {_seconds(lat['p95_s'])}, longest {_seconds(lat['max_s'])}."
            )
    else:
        out.append("No job went back to the queue in the window.")
    ready = lat["ready"]
    oldest = f", the oldest for {_seconds(lat['oldest_ready_s'])}" if ready else ""
    if len(out) > 3:
        out.append("")
    out.append(f"Now: {ready} job(s) ready to run{oldest}.")
    return out
