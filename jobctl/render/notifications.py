"""The reclaimer's notifications as each receiver wants them: jobctl's own JSON (one
versioned schema, ``jobctl.notification/1``), Slack's incoming-webhook message, PagerDuty's
Events API v2 (``trigger`` and ``resolve`` by dedup key). Pure: no network, no clock.

A ``Notice`` is one thing worth telling (docs/monitoring.md#notifications):

* ``reclaimed``: jobs the reclaimer requeued (counts since the last notice of it);
* ``parked``: jobs it failed or parked for a human (manual policy, attempts exhausted);
* ``expiry_burst``: many leases expired at once (workers died together); a condition;
* ``review_waiting``: jobs wait for a human (``jobctl review``); a condition;
* ``target_down``: the database does not answer; a condition;
* ``reclaimer_error``: the reclaimer stopped on an error it does not retry;
* ``paused``: a kind or queue was paused (``jobctl pause``): who, why, the jobs it holds back;
* ``resumed``: a pause went (``jobctl resume``): how long it was on, who had paused it, why;
* ``resolved``: a condition (``condition``) cleared.

A condition is told once it has lasted the reclaimer's ``--notify-after`` (``since`` says when it
began): one that clears sooner (a database restarted in a few seconds) is told nothing.

PagerDuty's incidents are for conditions only: each condition's ``trigger`` (its dedup key
``jobctl/TARGET/TABLE/CONDITION``) has its ``resolve`` when it clears; the one-off events
(``reclaimed``, ``parked``, ``reclaimer_error``, ``paused``, ``resumed``) open nothing, they
are Change Events (the Events API's ``/v2/change/enqueue``, beside the ``/v2/enqueue`` you
give), so a routine reclaim, or a pause, shows on the service's timeline without paging
anyone or leaving an incident open.

Text from rows (ids, the table's name, an error) is made visible (``safe_text``) in every
human-readable field, and Slack's ``<``, ``>`` and ``&`` are escaped (no link or mention can
come of a worker's name); the JSON's ``ids`` keep the values exact.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from jobctl import durations
from jobctl.contract import safe_text

SCHEMA = "jobctl.notification/1"
EVENTS = (
    "reclaimed",
    "parked",
    "expiry_burst",
    "review_waiting",
    "target_down",
    "reclaimer_error",
    "paused",
    "resumed",
    "resolved",
)
CONDITIONS = ("expiry_burst", "review_waiting", "target_down")  # these resolve
# these never resolve: PagerDuty's Change Events, paging nobody
ONE_OFF = ("reclaimed", "parked", "reclaimer_error", "paused", "resumed")
FORMATS = ("json", "slack", "pagerduty")
MAX_IDS = 20  # the ids a notice carries at most (``ids_truncated`` says when there were more)
SEVERITY = {
    "reclaimed": "info",
    "parked": "warning",
    "expiry_burst": "warning",
    "review_waiting": "warning",
    "target_down": "critical",
    "reclaimer_error": "critical",
    "paused": "info",
    "resumed": "info",
    "resolved": "info",
}


@dataclasses.dataclass(frozen=True)
class Notice:
    event: str  # one of EVENTS
    condition: str  # what it is about: the event itself, or the condition a resolved clears
    summary: str  # one line for a person
    table: str
    target: str | None
    at: dt.datetime
    host: str  # where the reclaimer (or the watch) runs
    command: str  # reclaim --every, stuck --watch
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    ids: list[str] = dataclasses.field(default_factory=list)
    next: list[str] = dataclasses.field(default_factory=list)  # the commands to run next
    suppressed: int = 0  # notices of this condition held back by the rate limit since the last
    # a condition's trigger: when the condition began (it is told once it has lasted the
    # reclaimer's --notify-after); None for every other notice
    since: dt.datetime | None = None
    # paused, resumed: the pause (dimension, value, reason, actor, db_role, paused_at,
    # paused_s, waiting), texts as the database holds them
    pause: dict[str, Any] | None = None

    @property
    def dedup_key(self) -> str:
        """The same for every notice of one condition on one table of one target: what a
        receiver groups by, and what PagerDuty resolves by."""
        return dedup_key(self.target, self.table, self.condition)

    @property
    def severity(self) -> str:
        return SEVERITY[self.event]


def dedup_key(target: str | None, table: str, condition: str) -> str:
    """A condition's key on one table of one target (``Notice.dedup_key``)."""
    return f"jobctl/{target or '-'}/{table}/{condition}"


def as_json(n: Notice) -> dict[str, Any]:
    """jobctl's own payload (schema ``jobctl.notification/1``); ``pause`` in paused and
    resumed only."""
    payload = {
        "schema": SCHEMA,
        "event": n.event,
        "condition": n.condition,
        "status": "resolved" if n.event == "resolved" else "firing",
        "severity": n.severity,
        "summary": n.summary,
        "dedup_key": n.dedup_key,
        "at": n.at.isoformat(),
        "since": n.since.isoformat() if n.since is not None else None,
        "target": n.target,
        "table": n.table,
        "source": {"host": n.host, "command": n.command},
        "counts": n.counts,
        "ids": [str(i) for i in n.ids[:MAX_IDS]],
        "ids_truncated": len(n.ids) > MAX_IDS,
        "suppressed": n.suppressed,
        "next": n.next,
    }
    if n.pause is not None:
        payload["pause"] = n.pause
    return payload


def pause_detail(p: dict[str, Any]) -> dict[str, Any]:
    """A pause (``ops.pause.waiting``'s row) as a notice carries it: JSON's types, its time
    in ISO 8601."""
    at = p.get("paused_at")
    return {
        "dimension": p["dimension"],
        "value": p["value"],
        "reason": p.get("reason"),
        "actor": p.get("actor"),
        "db_role": p.get("db_role"),
        "paused_at": at.isoformat() if isinstance(at, dt.datetime) else at,
        "paused_s": float(p.get("paused_s") or 0.0),
        "waiting": int(p.get("waiting") or 0),
    }


def pause_summary(event: str, p: dict[str, Any]) -> str:
    """``paused``'s and ``resumed``'s line: what, who paused it and why, the jobs held back
    (paused) or how long it was on (resumed)."""
    who = p.get("actor") or p.get("db_role") or "an unknown role"
    what = f"{p['dimension']} {p['value']}"
    if event == "paused":
        return f"{what} paused by {who}: {p.get('reason')} ({p['waiting']} queued job(s) wait)"
    took = durations.human(float(p.get("paused_s") or 0.0))
    return f"{what} resumed after {took} (paused by {who}: {p.get('reason')})"


def _slack_text(text: str) -> str:
    """Text for Slack's mrkdwn: visible, and no ``<``/``>``/``&`` (links, mentions)."""
    return safe_text.visible(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_code(text: str) -> str:
    return "`" + _slack_text(text).replace("`", "'") + "`"


def as_slack(n: Notice) -> dict[str, Any]:
    """An incoming-webhook message: the summary as its text, the details in a block."""
    mark = {"critical": ":red_circle:", "warning": ":warning:", "info": ":information_source:"}
    icon = ":white_check_mark:" if n.event == "resolved" else mark[n.severity]
    where = _slack_code(n.table) + (f" on {_slack_code(n.target)}" if n.target else "")
    lines = [f"{icon} *{_slack_text(n.summary)}*", f"{n.event} in {where}"]
    if n.counts:
        lines.append(", ".join(f"{k}: {v}" for k, v in n.counts.items()))
    if n.ids:
        more = f" and {len(n.ids) - MAX_IDS} more" if len(n.ids) > MAX_IDS else ""
        lines.append("ids: " + ", ".join(_slack_code(str(i)) for i in n.ids[:MAX_IDS]) + more)
    if n.pause is not None:
        who = n.pause.get("actor") or n.pause.get("db_role") or "?"
        lines.append(
            f"{_slack_code(str(n.pause['dimension']))} {_slack_code(str(n.pause['value']))}"
            f" paused by {_slack_code(str(who))}: {_slack_text(str(n.pause.get('reason')))}"
        )
    if n.since is not None:
        took = durations.human((n.at - n.since).total_seconds())
        lines.append(f"since {n.since.isoformat(timespec='seconds')} (for {took})")
    if n.suppressed:
        lines.append(f"({n.suppressed} earlier notice(s) held back by the rate limit)")
    if n.next:
        lines.append("next: " + "; ".join(_slack_code(c) for c in n.next))
    text = "\n".join(lines)
    return {
        "text": f"{icon} {_slack_text(n.summary)}",
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }


def is_change(n: Notice) -> bool:
    """Whether PagerDuty takes ``n`` as a Change Event (a one-off event: nothing to resolve)
    rather than as an alert (a condition's ``trigger``, or its ``resolve``)."""
    return n.event in ONE_OFF


def change_url(url: str) -> str | None:
    """The Change Events endpoint beside an Events API v2 URL (``…/v2/enqueue`` ->
    ``…/v2/change/enqueue``), or None when ``url`` does not end so (a relay of its own)."""
    head, sep, tail = url.partition("?")
    if not head.endswith("/enqueue") or head.endswith("/change/enqueue"):
        return None
    return head.removesuffix("/enqueue") + "/change/enqueue" + sep + tail


def as_pagerduty_change(n: Notice, routing_key: str) -> dict[str, Any]:
    """A Change Event (``/v2/change/enqueue``): a one-off event on the service's timeline."""
    return {
        "routing_key": routing_key,
        "payload": {
            "summary": safe_text.visible(n.summary)[:1024],
            "source": n.host,
            "timestamp": n.at.isoformat(),
            "custom_details": as_json(n),
        },
    }


def as_pagerduty(n: Notice, routing_key: str) -> dict[str, Any]:
    """An Events API v2 event: ``trigger`` (by the notice's dedup key), or ``resolve`` for a
    resolved condition; a one-off event is a Change Event (``as_pagerduty_change``)."""
    if is_change(n):
        return as_pagerduty_change(n, routing_key)
    if n.event == "resolved":
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": n.dedup_key}
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": n.dedup_key,
        "payload": {
            "summary": safe_text.visible(n.summary)[:1024],
            "source": n.host,
            "severity": n.severity,
            "timestamp": (n.since or n.at).isoformat(),  # when the condition began
            "component": safe_text.visible(n.table),
            "group": safe_text.visible(n.target or ""),
            "class": n.event,
            "custom_details": as_json(n),
        },
    }


def body(n: Notice, fmt: str, *, routing_key: str = "") -> bytes:
    """The HTTP body for ``fmt`` (json, slack, pagerduty), UTF-8 JSON."""
    if fmt == "slack":
        made = as_slack(n)
    elif fmt == "pagerduty":
        made = as_pagerduty(n, routing_key)
    else:
        made = as_json(n)
    return json.dumps(made, ensure_ascii=False).encode()
