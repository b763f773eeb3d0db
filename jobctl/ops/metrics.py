"""jobctl metrics: lease health's figures, and the alert thresholds they break
(``render.openmetrics`` writes them as OpenMetrics text); ``run``, the command's workflow, the
one it calls whatever the number of targets. Example::

    (outcome,) = run(settings, Access("metrics"), Ask(expiring_within=None,
                     reclaim_window=dt.timedelta(minutes=5), max_stuck=10), say=print)
    print(outcome.value.table, outcome.value.figures["stuck_auto"], outcome.value.breached)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from jobctl import errors
from jobctl.contract.shapes import Row
from jobctl.db.session import Session
from jobctl.ops import fleet, pause
from jobctl.ops.slices import EVERY, Slice

if TYPE_CHECKING:
    from jobctl.ops.sessions import Access
    from jobctl.ops.standby import Standing


def collect(
    s: Session,
    *,
    expiring_within: dt.timedelta | None,
    reclaim_window: dt.timedelta,
    what: Slice = EVERY,
) -> Row:
    """The figures: stuck jobs by policy, oldest expired lease, live/expiring, reclaims, review
    (``what``: of those jobs only, by kind, queue, error; the reclaims are the table's)."""
    what.check(s.table.mapping)
    narrowed = what.params()
    return (
        reclaimer(s)
        | s.one("metrics_leases", {"soon": expiring_within, **narrowed})
        | s.one("metrics_reclaims", {"window": reclaim_window, "job_table": s.table.qualified})
        | _review(s, narrowed)
        | s.one("queue_ready", narrowed)
        | {
            # None: each lease against its own length (its last third)
            "expiring_within_s": expiring_within and expiring_within.total_seconds(),
            "reclaim_window_s": reclaim_window.total_seconds(),
        }
    )


def _review(s: Session, narrowed: Row) -> Row:
    """The jobs awaiting review (awaiting_review, as review lists them) and how many of them
    are manual by their effective policy (``awaiting``: jobctl_manual_review_jobs)."""
    counts = s.one("review_count", narrowed)
    return {"awaiting_review": counts["awaiting_review"], "awaiting": counts["awaiting_manual"]}


LABEL_TOP = 10  # kinds (and queues) labelled one by one at most; the rest as "other"
# a kind's (or queue's) label at most this many characters, cut on the server with a note
# (summary_groups): an application's kind may be 30 MB, and each scrape would carry it
LABEL_CHARS = 256
GROUP_COUNTS = ("stuck", "processing", "ready", "awaiting_review")  # what each group counts


def by_group(s: Session, *, expiring_within: dt.timedelta | None, what: Slice, top: int) -> Row:
    """The job counts per mapped kind and queue (summary --by's statement), each bounded to
    the ``top`` groups by count, the rest summed as ``other`` (``bounded``): a label set
    Prometheus can hold, however many kinds the table has."""
    from jobctl.ops import triage

    found: Row = {}
    for by in s.table.mapping.mapped_optional:
        found_by = triage.summary_by(
            s, by, expiring_within, what=what, limit=None, shown=LABEL_CHARS
        )
        rows = found_by["groups"]
        found[by] = bounded(rows, by, top)
    return found


def bounded(groups: list[Row], by: str, top: int) -> list[Row]:
    """``groups`` (rows of counts keyed ``by``) as at most ``top`` rows by their total count,
    the others summed into one whose ``by`` is ``other``; a group without a value (NULL) is
    ``none``. Each row's ``bucket`` says which it is (``value``, ``null``, ``rest``), so a
    kind really named ``other`` or ``none`` stays a series of its own; groups that still
    meet under one label (values that read the same as text) are summed, never two series.
    Pure."""
    ranked = sorted(groups, key=lambda g: (-sum(g[c] for c in GROUP_COUNTS), str(g[by])))
    kept: dict[tuple[str, str], Row] = {}
    for g in ranked[:top]:
        label, bucket = ("none", "null") if g[by] is None else (str(g[by]), "value")
        _add(kept, by, label, bucket, [g])
    if ranked[top:]:
        _add(kept, by, "other", "rest", ranked[top:])
    return list(kept.values())


def _add(
    kept: dict[tuple[str, str], Row], by: str, label: str, bucket: str, rows: list[Row]
) -> None:
    """``rows``' counts added to ``kept``'s row for (``label``, ``bucket``)."""
    row = kept.setdefault(
        (label, bucket), {by: label, "bucket": bucket, **dict.fromkeys(GROUP_COUNTS, 0)}
    )
    for c in GROUP_COUNTS:
        row[c] += sum(g[c] for g in rows)


def on_server(
    s: Session,
    standing: Standing | None,
    *,
    expiring_within: dt.timedelta | None,
    reclaim_window: dt.timedelta,
    what: Slice = EVERY,
    top: int = LABEL_TOP,
) -> Row:
    """The figures of one database, with the server's (a standby's lag): what ``metrics``
    exposes for one database and for each target; the caller holds the transaction."""
    from jobctl.ops import standby

    figures = collect(s, expiring_within=expiring_within, reclaim_window=reclaim_window, what=what)
    if s.table.mapping.mapped_optional:
        figures["groups"] = by_group(s, expiring_within=expiring_within, what=what, top=top)
    figures["pauses"] = pause_labels(pause.waiting(s))
    return figures | standby.figures(standing)


def pause_labels(pauses: list[Row]) -> list[Row]:
    """The table's pauses (``ops.pause.waiting``: the table's, whatever slice the figures
    count) as series: each its dimension, its value cut past LABEL_CHARS characters with a
    note (an operator may pause a 30 MB kind; every scrape would carry it), how long it has
    been on, the queued jobs it holds back and its claims since (None: not seen). Values
    that meet under one cut label are one series (the longest pause, their waiting jobs and
    claims summed), never two. Pure."""
    kept: dict[tuple[str, str], Row] = {}
    for p in pauses:
        value = str(p["value"])
        if len(value) > LABEL_CHARS:
            head = value[:LABEL_CHARS]
            value = f"{head}… ({len(p['value'].encode()) - len(head.encode())} more bytes)"
        row = kept.setdefault(
            (p["dimension"], value),
            {
                "dimension": p["dimension"],
                "value": value,
                "paused_s": 0.0,
                "waiting": 0,
                "claims_since": 0,
            },
        )
        row["paused_s"] = max(row["paused_s"], float(p["paused_s"] or 0.0))
        row["waiting"] += int(p["waiting"])
        # the claims since the pause (claims_since_pause); None where the history keeps none
        # of the ended attempts: not seen, no series
        since, summed = p.get("claims_since"), row["claims_since"]
        row["claims_since"] = None if since is None or summed is None else summed + int(since)
    return list(kept.values())


def breaches(figures: Row, *, max_stuck: int | None, max_overdue: dt.timedelta | None) -> list[str]:
    """Which thresholds the figures break, each as one line."""
    found = []
    stuck = figures["stuck_auto"] + figures["stuck_manual"]
    if max_stuck is not None and stuck > max_stuck:
        found.append(f"{stuck} stuck jobs > --max-stuck {max_stuck}")
    if max_overdue is not None and figures["oldest_expired_s"] > max_overdue.total_seconds():
        found.append(
            f"oldest expired lease {figures['oldest_expired_s']:.0f}s > --max-overdue "
            f"{max_overdue.total_seconds():g}s"
        )
    return found


def reclaimer(s: Session) -> Row:
    """The table's reclaimer passes (history migration 006): their count, the last one's
    Unix time (None: never), how long ago, the reclaimers' interval; {} where the record is
    not installed or not readable by this role (metrics then say nothing of them)."""
    if not s.one("reclaimer_passes_readable")["readable"]:
        return {}
    return s.one("metrics_reclaimer", {"job_table": s.table.qualified})


def reclaimer_silent(figures: Row, *, intervals: int = 3) -> str | None:
    """A line when the table's reclaimers (``reclaim --every``) have not finished a pass for
    ``intervals`` of their interval (at least a minute), else None: what summary says. A
    table no service ever ran on says nothing (a reclaim from cron is not one); its metrics
    say passes 0 and no last pass, for an alert that wants one."""
    if not figures.get("reclaimer_passes"):
        return None
    idle, every = figures["reclaimer_idle_s"], figures["reclaimer_every_s"] or 0.0
    if idle is not None and idle > max(intervals * every, 60.0):
        return (
            f"no reclaimer pass for {idle:.0f}s (its interval: {every:g}s): is jobctl reclaim "
            "--every still running? (journalctl -u jobctl-reclaimer)"
        )
    return None


# ---------------------------------------------------------------- the workflow
@dataclasses.dataclass(frozen=True)
class Ask:
    """What the operator asked of ``metrics``: the figures' windows, what they count (``what``,
    ``top``: one database only) and the thresholds (``max_stuck``, ``max_overdue``)."""

    expiring_within: dt.timedelta | None
    reclaim_window: dt.timedelta
    what: Slice = EVERY  # --kind, --queue, --error (one database only)
    top: int = LABEL_TOP  # --label-top (one database: across targets, the default)
    max_stuck: int | None = None
    max_overdue: dt.timedelta | None = None


@dataclasses.dataclass(frozen=True)
class Measured:
    """A target's figures (``on_server``), its table, and the thresholds they break."""

    table: str
    figures: Row
    breached: list[str]


def run(
    where: fleet.Where, access: Access, ask: Ask, *, say: fleet.Say
) -> list[fleet.Outcome[Measured]]:
    """``metrics`` on one database or on every target at once, each target's outcome in the
    targets' order (one database's failure raised). A slice is for one database."""
    several = fleet.several(where)
    if several and ask.what:
        raise errors.UsageError("metrics --kind/--queue/--error: give one --target (or none)")

    def work(s: Session, st: Standing, _say: fleet.Say) -> Measured:
        figures = on_server(
            s,
            st,
            expiring_within=ask.expiring_within,
            reclaim_window=ask.reclaim_window,
            what=ask.what,
            top=LABEL_TOP if several else ask.top,
        )
        found = breaches(figures, max_stuck=ask.max_stuck, max_overdue=ask.max_overdue)
        return Measured(s.table.qualified, figures, found)

    return fleet.once(where, access, work, say=say)
