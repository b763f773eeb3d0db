"""jobctl explain: a job's history told in plain sentences, and the same facts as fields.

Every value a sentence takes from a row (a worker's name, an actor, a role, a status, a text
id, a reason, what a role claimed) is the application's text, not jobctl's: it appears as it
is only when it is one plain word (``_said``), else in double quotes with any quote or
backslash inside escaped (as in a JSON string), so that no value can end its quotes and read as
the sentence's own words. Ids in the commands a sentence suggests are quoted for a shell.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from jobctl import durations
from jobctl.contract.shapes import History, Row
from jobctl.render import judgements

GAP_WARNING = 0.8  # a heartbeat gap above 80 % of the lease: the lease is too short


def _at(value: dt.datetime | str | None) -> str:
    """A time in a sentence; one Python cannot hold (infinity) comes as the server's text."""
    if not isinstance(value, dt.datetime):
        return "an unknown time" if value is None else str(value)
    return value.isoformat(sep=" ", timespec="seconds")


def _s(seconds: float | None) -> str:
    return "?" if seconds is None else durations.human(seconds)


def _length(seconds: float | None) -> str:
    """A lease's length (lease_expires_at less the claim or the last heartbeat), or "length
    unknown" when the times do not give it (never a bare "?")."""
    return "length unknown" if seconds is None else durations.human(seconds)


def _lease(seconds: float | None) -> str:
    """``lease 15s``, or ``lease length unknown``."""
    return f"lease {_length(seconds)}"


def _against(seconds: float | None) -> str:
    """``against a lease of 15s``, or ``against a lease of unknown length``."""
    return "against a lease of " + ("unknown length" if seconds is None else _length(seconds))


def _of(seconds: float | None) -> str:
    """After "its lease": `` of 15s``, or `` (length unknown)``."""
    return " (length unknown)" if seconds is None else f" of {_length(seconds)}"


# one word: it cannot say anything but itself. '#' is a word's character so that a kind is
# told alike whatever wrote it: Billing::ChargeJob and Delayed::Job's User#send_welcome, both
# unquoted (a kind with a space or a quote is quoted, as any value)
_PLAIN = re.compile(r"[A-Za-z0-9_.:@/+#-]+")


def _said(value: Any) -> str:
    """A value from a row inside a sentence: as it is when it is one plain word (web-2,
    alice@ops, 42, processing), else quoted (``"web-1. At ... \\"ok\\""``)."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) else _quoted(text)


def _quoted(text: str) -> str:
    """Text in double quotes, a quote or backslash inside escaped: one value, always. Other
    characters are left as they are (the story's JSON keeps the data; a terminal shows the
    controls escaped, as safe_text does everywhere)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _arguments(command: str, job_id: Any, options: str, again: str = "") -> str:
    """A command the story suggests, the id quoted for a shell (after ``--`` when it would
    read as an option), after the global options it repeats (``again``: ``--table X``, as
    typed): what is pasted runs on that job of that table and nothing else."""
    quoted = shlex.quote(str(job_id))
    if quoted.startswith("-"):
        return f"jobctl {again}{command} {options} -- {quoted}"
    return f"jobctl {again}{command} {quoted} {options}"


def attempt_facts(attempt: Mapping[str, Any]) -> Row:
    """One attempt's heartbeat facts: typical and largest gap against the lease."""
    heartbeats = attempt["heartbeats"] or 0
    typical = None
    if heartbeats and attempt["last_heartbeat_at"] is not None:
        typical = (
            attempt["last_heartbeat_at"] - attempt["claimed_at"]
        ).total_seconds() / heartbeats
    lease = attempt.get("lease_s")
    largest = attempt["max_heartbeat_gap_s"]
    warning = bool(lease and largest is not None and largest >= GAP_WARNING * lease)
    return {**attempt, "typical_heartbeat_gap_s": typical, "lease_too_short": warning}


def explain(
    history: History,
    parked: str = "failed",
    failed: str = "failed",
    processing: str = "processing",
    mapped: Sequence[str] = (),
    again: str = "",
    unlimited: int | None = None,
) -> Row:
    """The story of a job from ``triage.history``: sentences plus the facts behind them.

    ``parked``: the status reclaim parks jobs in (the table's own, see --park-status);
    ``failed``: the table's failed status; ``processing``: its processing status;
    ``mapped``: the optional columns the table maps (kind, queue), named in the first line.
    ``unlimited``: the max_attempts value that means no limit (--unlimited-max-attempts).
    A command the story suggests is one jobctl accepts for the job as it is
    (``manual.refusal``): no fail of a job already failed, unless it awaits review; it repeats
    ``again``, the global options typed (``Invocation.again``), so that it runs as printed."""
    job, events = history["job"], history["events"]
    attempts = [attempt_facts(a) for a in history["attempts"]]
    named = [f"{d} {_said(job.get(d))}" for d in mapped if d in job]  # kind, queue
    what = f" ({', '.join(named)})" if named else ""
    used = f"{job['attempts']} of {job['max_attempts']} attempts used"
    if unlimited is not None and job["max_attempts"] == unlimited:
        used = f"{job['attempts']} attempt(s) used, no limit (max_attempts {unlimited})"
    story = [
        f"Job {_said(job['id'])}{what} is {_said(job['status'])} "
        f"({_policy(job)}, {used}, reclaimed {job['reclaim_count']} time(s))."
    ]
    by_token = {a["attempt_token"]: a for a in attempts}
    for event in events:
        story.extend(_sentences(event, by_token.get(event["attempt_token"])))
    if job.get("lease_state") == "expired":  # (only a processing job has a lease)
        story.append(
            f"Its lease ran out at {_at(job['lease_expires_at'])} and it has not been "
            f"reclaimed yet: jobctl {again}reclaim --dry-run shows what would happen."
        )
    if job.get("lease_expiring_soon"):  # live, in the last third of its lease
        story.append(
            f"Its lease runs out at {_at(job['lease_expires_at'])}, in the last third of its "
            f"length: its worker has not extended it lately (jobctl {again}stuck --expiring lists "
            "every such job)."
        )
    if job.get("lease_state") == "none" and job["status"] == processing:
        story.extend(no_lease_sentences(job, again))
    story.extend(_awaiting_review(job, parked, again))
    warnings = [a for a in attempts if a["lease_too_short"]]
    story.extend(_lease_warning(a) for a in warnings)
    return {
        "id": job["id"],
        "status": job["status"],
        "story": story,
        "attempts": attempts,
        "events": events,
        "lease_too_short": bool(warnings),
    }


def _policy(job: Row) -> str:
    """The policy that applies to a job (effective_policy), and what makes it so when its kind
    or queue does: "manual policy by its kind"."""
    effective = job.get("effective_policy") or job["recovery_policy"]
    source = job.get("policy_from")
    by = f" by its {source}" if effective == "manual" and source in ("kind", "queue") else ""
    return f"{_said(effective)} policy{by}"


def _awaiting_review(job: Row, parked: str, again: str) -> list[str]:
    """The sentence of a job reclaim parked for a human (the database's judgement,
    awaiting_review, as review lists it), with the two commands that end it."""
    if not job.get("awaiting_review"):
        return []
    # fail is accepted on a job awaiting review, even one reclaim failed (manual.refusal)
    return [
        f"It is parked in {_said(parked)}, awaiting a human ({judgements.why_phrase(job)}; "
        f"jobctl {again}review lists every such job): "
        f"{_arguments('requeue', job['id'], '--reason ...', again)} runs it again, "
        f"{_arguments('fail', job['id'], '--reason ...', again)} gives it up."
    ]


def _lease_warning(attempt: Row) -> str:
    """The warning of an attempt whose heartbeats came close to losing its lease."""
    gap = _s(attempt["max_heartbeat_gap_s"])
    return (
        f"Warning: attempt {attempt['attempt']}'s largest heartbeat gap ({gap})"
        f" came within {100 - GAP_WARNING * 100:.0f} % of its lease ({_s(attempt['lease_s'])}): "
        "the lease is too short for this job, or its worker stalls."
    )


def no_lease_sentences(job: Mapping[str, Any], again: str = "") -> list[str]:
    """What a processing job with no lease (no expiry or no attempt token) is, and what to do
    (each command repeating ``again``, the global options typed)."""
    missing = "no lease expiry" if job.get("lease_expires_at") is None else "no attempt token"
    claimed = job.get("reserved_at")
    by = job.get("reserved_by")
    options = "--force --reason ..." if job.get("lease_less_recent") else "--reason ..."
    return [
        f"It is processing with {missing}: code that sets no lease claimed it"
        + (f" at {_at(claimed)}" if claimed is not None else "")
        + (f" as worker {_said(by)}" if by is not None else "")
        + ". jobctl cannot tell a slow worker from a dead one, and reclaim never touches it, "
        "by design.",
        *_recent_claim(job),
        f"Find the writer that claims without a lease with jobctl {again}doctor. If its worker "
        f"is gone, {_arguments('requeue', job['id'], options, again)} runs it again and "
        f"{_arguments('fail', job['id'], options, again)} gives it up; either "
        "write is fenced on the row's version as read, since there is no token to fence on. "
        f"For all such jobs at once, jobctl {again}requeue --no-lease --save-plan FILE lists "
        f"them and saves a plan to review, applied by jobctl {again}requeue --plan FILE.",
    ]


def _recent_claim(job: Mapping[str, Any]) -> list[str]:
    """What the claim's age (``lease_less_recent``) makes of a job with no lease."""
    if not job.get("lease_less_recent"):
        return ["It was claimed over an hour ago: requeue and fail take it without --force."]
    known = isinstance(job.get("reserved_at"), dt.datetime)  # (an unusable one comes as text)
    when = "within the last hour" if known else "at no time jobctl can read"
    return [
        f"It was claimed {when}: its worker may still be running it, so requeue and fail "
        "refuse it as they refuse a live lease (--force overrides)."
    ]


def _uncounted(attempt: Row, stats: str) -> str:
    """What the history knows of an attempt's heartbeats when not every one was counted."""
    lease = _lease(attempt.get("lease_s"))
    if stats == "none":
        return f"(L{lease[1:]}; the worker history is not installed: no heartbeat statistics.)"
    if stats == "transitions":
        last = attempt["last_heartbeat_at"]
        heard = f"last heartbeat at {_at(last)}" if last is not None else "no heartbeat"
        return (
            f"({heard}, {lease}; the default history does not count heartbeats: "
            "schema apply --history late or exact does.)"
        )
    if attempt["last_heartbeat_at"] is None:
        return f"It never heartbeat ({lease})."
    late = attempt.get("late_heartbeats") or 0
    if not late:
        return (
            "It heartbeat on time, every gap within half its lease"
            f"{_of(attempt.get('lease_s'))}; last at "
            f"{_at(attempt['last_heartbeat_at'])}."
        )
    return (
        f"{late} heartbeat(s) came after half its lease, the largest gap "
        f"{_s(attempt['max_heartbeat_gap_s'])} {_against(attempt.get('lease_s'))}; last at "
        f"{_at(attempt['last_heartbeat_at'])}."
    )


def _sentences(event: Mapping[str, Any], attempt: Row | None) -> list[str]:
    claims = event.get("claimed") or {}
    if claims.get("action"):
        return [_forged(event, claims)]
    told = _told(event, attempt)
    if claims.get("changed"):
        told.append(
            f"Its actor or reason were changed to {_said(claims.get('actor'))} "
            f"({_quoted(claims['reason']) if claims.get('reason') else 'no reason'}) while the "
            "statement ran, by a trigger of the application's: the history kept the ones "
            "jobctl declared first."
        )
    elif claims.get("actor"):
        told.append(
            f"Its database role {_said(event['db_role'])} claimed to be "
            f"{_said(claims['actor'])}: not one of jobctl's roles, so the history names the role."
        )
    return told


def _forged(event: Mapping[str, Any], claims: Mapping[str, Any]) -> str:
    """A role that is not jobctl's set jobctl_action itself, or a trigger of the application's
    did inside jobctl's own write (nested): told as what it is."""
    who = f" claiming to be {_said(claims['actor'])}" if claims.get("actor") else ""
    why = f" ({_quoted(claims['reason'])})" if claims.get("reason") else ""
    if claims.get("nested"):
        return (
            f"At {_at(event['at'])} a trigger of the application's, inside another write of "
            f"role {_said(event['db_role'])}, set jobctl_action={_said(claims['action'])}{who}"
            f"{why}: not jobctl's own statement, so not a manual action; the row shows "
            f"{_said(event['event'])} ({_said(event['from_status'])} -> "
            f"{_said(event['to_status'])})."
        )
    return (
        f"At {_at(event['at'])} role {_said(event['db_role'])} set "
        f"jobctl_action={_said(claims['action'])}{who}{why}: not one of jobctl's roles, so not "
        f"a manual action; the row shows {_said(event['event'])} "
        f"({_said(event['from_status'])} -> {_said(event['to_status'])})."
    )


def _told(event: Mapping[str, Any], attempt: Row | None) -> list[str]:
    kind, at, actor = event["event"], _at(event["at"]), event["actor"]
    who = _said(actor)
    worker = _said(event["worker"])
    role = event.get("db_role")
    # the database role that made it: after the worker, or after the actor unless it is the role
    by_role = f" (role {_said(role)})" if role else ""
    as_role = by_role if role != actor else ""
    said = f": {_quoted(event['reason'])}" if event.get("reason") else ""
    why = said + as_role
    became = _said(event["to_status"])
    if kind == "claimed":
        text = [f"At {at} worker {worker} claimed it (attempt {event['attempt']})."]
        if attempt is not None:
            stats = attempt.get("heartbeat_stats", "exact")
            if stats != "exact":
                text.append(_uncounted(attempt, stats))
            elif attempt["heartbeats"]:
                text.append(
                    f"It heartbeat {attempt['heartbeats']} time(s), typically every "
                    f"{_s(attempt['typical_heartbeat_gap_s'])}, at most "
                    f"{_s(attempt['max_heartbeat_gap_s'])} apart, "
                    f"{_against(attempt['lease_s'])}."
                )
            else:
                text.append(f"It never heartbeat ({_lease(attempt['lease_s'])}).")
        return text
    if kind == "reclaimed":
        ran_out = attempt["lease_expires_at"] if attempt else None
        return [
            f"Its lease ran out at {_at(ran_out)}; at {at} {who} reclaimed it and it "
            f"became {became}{as_role}."
        ]
    if kind == "completed":
        if event["worker"] is None and event["attempt_token"] is None:
            return [
                f"At {at} it completed (attempt {event['attempt']}; the default history does "
                "not record completed attempts, so not which worker: schema apply --history "
                "late does)."
            ]
        return [f"At {at} worker {worker} completed it{by_role}."]
    if kind in ("failed", "retried"):
        gave_up = f"gave it up ({became}){said}{by_role}"
        return [f"At {at} worker {worker} {gave_up}."]
    if kind == "requeued_by_other":
        return [
            f"At {at} it was put back to {became} while worker {worker} held it, not by jobctl "
            f"nor by that worker's fenced fail (a sweeper, the application's own code, a "
            f"person){said}{by_role}."
        ]
    if kind == "requeued":
        return [f"At {at} {who} requeued it by hand{why}."]
    if kind == "manually_failed":
        return [f"At {at} {who} failed it by hand{why}."]
    if kind == "cancelled":
        return [
            f"At {at} {who} cancelled the running attempt of worker {worker} (it became "
            f"{became}; the worker's next heartbeat finds no row){why}."
        ]
    if kind in ("quarantined", "policy_changed"):
        return [f"At {at} {who} changed its recovery policy ({kind}){why}."]
    was = _said(event["from_status"])
    return [f"At {at}: {_said(kind)} ({was} -> {became}){said}{by_role}."]
