"""``jobctl metrics``' exposition: lease health (``ops.metrics.collect``'s figures) in the
Prometheus text format (0.0.4: what node_exporter's textfile collector, promtool and a
scrape read; a counter's family is named with its ``_total``), ending in ``# EOF`` (a
comment there; a file that lacks it was cut short). Pure: no database, no printing. Example::

    sys.stdout.write(openmetrics.exposition(metrics.collect(s, ...), s.table.qualified))

Labels are where a series is, never how it was read: ``target`` (with ``--target`` or across
targets) and ``table``; option values (``--expiring-within``, ``--reclaim-window``) and the
server's role are gauges of their own, so a flag change or a failover keeps every series.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobctl.contract.shapes import Row

Family = tuple[str, str, str, list[tuple[str, Any]]]  # name, type, help, (labels, value)s

UP_HELP = "1 when jobctl read every database of this run, 0 when one failed (see the log)."
TARGET_UP_HELP = (
    "1 when the target answered this scrape, 0 when it failed (down, no schema, timeout)."
)
COLLECTED_HELP = "When jobctl collected these figures (Unix time): stale when it stops moving."


def _label(value: str) -> str:
    """A label value escaped as the text format wants: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _target(target: str | None) -> str:
    return "" if target is None else f'target="{_label(target)}"'


def _join(*labels: str) -> str:
    return ",".join(label for label in labels if label)


def exposition(
    figures: Row, table: str, *, target: str | None = None, collected_at: float | None = None
) -> str:
    """One database's figures; ``target``: its name (``--target``), a label on every sample."""
    t = _join(_target(target), f'table="{_label(table)}"')
    head = [(("jobctl_up", "gauge", UP_HELP, [(_target(target), 1)]))]
    if target is not None:
        head.append(("jobctl_target_up", "gauge", TARGET_UP_HELP, [(_target(target), 1)]))
    return _text([*head, *_collected(collected_at, _target(target)), *_families(figures, t)])


def down(target: str | None = None, *, collected_at: float | None = None) -> str:
    """The exposition of a database that did not answer: up 0 (printed before the error, so
    a collector publishes the failure instead of keeping the last good figures)."""
    head = [("jobctl_up", "gauge", UP_HELP, [(_target(target), 0)])]
    if target is not None:
        head.append(("jobctl_target_up", "gauge", TARGET_UP_HELP, [(_target(target), 0)]))
    return _text([*head, *_collected(collected_at, _target(target))])


def _collected(at: float | None, labels: str) -> list[Family]:
    if at is None:
        return []
    return [("jobctl_collected_timestamp_seconds", "gauge", COLLECTED_HELP, [(labels, at)])]


def exposition_across(
    found: Sequence[tuple[str, tuple[str, Row]]],
    up: dict[str, bool],
    *,
    collected_at: float | None = None,
) -> str:
    """The figures of several targets (name, (table, figures)) as one exposition: every sample
    labelled with its target; ``jobctl_target_up`` says which targets answered (``up``)."""
    merged: dict[str, Family] = {}
    for target, (table, figures) in found:
        for name, kind, help_text, samples in _families(
            figures, f'target="{_label(target)}",table="{_label(table)}"'
        ):
            merged.setdefault(name, (name, kind, help_text, []))[3].extend(samples)
    everyone: Family = ("jobctl_up", "gauge", UP_HELP, [("", int(all(up.values())))])
    answered: Family = (
        "jobctl_target_up",
        "gauge",
        TARGET_UP_HELP,
        [(f'target="{_label(name)}"', int(ok)) for name, ok in up.items()],
    )
    return _text([everyone, answered, *_collected(collected_at, ""), *merged.values()])


def _text(families: Sequence[Family]) -> str:
    lines = []
    for name, kind, help_text, samples in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [
            f"{name}{{{labels}}} {value!r}" if labels else f"{name} {value!r}"
            for labels, value in samples
        ]
    return "\n".join([*lines, "# EOF"]) + "\n"


def _families(figures: Row, t: str) -> list[Family]:
    """The metric families of one table's figures, each sample's labels starting ``t``."""
    families = [*_lease_families(figures, t), *_queue_families(figures, t)]
    families += _settings_families(figures, t)
    for by, groups in (figures.get("groups") or {}).items():  # kind, queue: when mapped
        families.append(
            (
                f"jobctl_jobs_by_{by}",
                "gauge",
                f"Jobs by {by} (the mapped column) and state: stuck (lease expired), "
                "processing, ready, awaiting_review; the top ones by count "
                f'(bucket="value"), no {by} (NULL: {by}="none",bucket="null"), the rest '
                f'summed ({by}="other",bucket="rest"; metrics --label-top).',
                [
                    (
                        f'{t},{by}="{_label(str(g[by]))}",'
                        f'bucket="{g.get("bucket", "value")}",state="{state}"',
                        g[state],
                    )
                    for g in groups
                    for state in ("stuck", "processing", "ready", "awaiting_review")
                ],
            )
        )
    if "replica_lag_s" in figures:  # standby.figures: where the figures were read
        families += [
            (
                "jobctl_replica_lag_seconds",
                "gauge",
                "How far behind its primary the server read is (0 on a primary, -1 unknown).",
                [(t, figures["replica_lag_s"])],
            ),
            (
                "jobctl_server_standby",
                "gauge",
                "1 when the figures were read on a standby, 0 on a primary.",
                [(t, int(figures["standby"]))],
            ),
        ]
    families += _reclaimer_families(figures, t)
    families += _pause_families(figures, t)
    return families


def _pause_families(figures: Row, t: str) -> list[Family]:
    """The table's pauses (``jobctl pause``): one series per paused kind or queue, none
    when nothing is paused (a resumed pause's series ends)."""
    pauses = figures.get("pauses") or []
    if not pauses:
        return []
    labels = [
        f'{t},dimension="{_label(p["dimension"])}",value="{_label(p["value"])}"' for p in pauses
    ]
    claims = [
        (lab, int(p["claims_since"]))
        for lab, p in zip(labels, pauses, strict=True)
        if p.get("claims_since") is not None
    ]
    families: list[Family] = [
        (
            "jobctl_pause_seconds",
            "gauge",
            "How long a kind or queue has been paused (jobctl pause): its queued jobs are not "
            "claimed until jobctl resume.",
            [(lab, float(p["paused_s"])) for lab, p in zip(labels, pauses, strict=True)],
        ),
        (
            "jobctl_pause_waiting_jobs",
            "gauge",
            "Queued jobs a pause holds back: their kind or queue is paused (jobctl pause).",
            [(lab, int(p["waiting"])) for lab, p in zip(labels, pauses, strict=True)],
        ),
        (
            "jobctl_pause_claims",
            "gauge",
            "Claims of a paused kind or queue since its pause (running, and ended attempts the "
            "history records; no series where it records none, --history audit): workers that "
            "do not read pauses.",
            claims,
        ),
    ]
    return families if claims else families[:2]


def _settings_families(figures: Row, t: str) -> list[Family]:
    """The options the figures were read with, as values (labels would split the series)."""
    within = figures.get("expiring_within_s")  # None: each lease's last third, no window
    return [
        (
            "jobctl_expiring_within_seconds",
            "gauge",
            "The window of jobctl_expiring_soon_jobs (--expiring-within; absent: the last "
            "third of each lease).",
            [] if within is None else [(t, float(within))],
        ),
        (
            "jobctl_reclaim_window_seconds",
            "gauge",
            "The window of jobctl_recent_reclaims (--reclaim-window).",
            [(t, float(figures["reclaim_window_s"]))],
        ),
    ]


def _reclaimer_families(figures: Row, t: str) -> list[Family]:
    """The reclaims the history holds, and the reclaimer's own passes (when recorded)."""
    families: list[Family] = []
    if "reclaims_total" in figures:
        families.append(
            (
                "jobctl_reclaims_total",
                "counter",
                "Reclaims the history holds for the table (it only grows, but for a prune).",
                [(t, figures["reclaims_total"])],
            )
        )
    if figures.get("reclaimer_passes") is not None:
        families += [
            (
                "jobctl_reclaimer_passes_total",
                "counter",
                "Passes of reclaim --every recorded for the table (every reclaimer).",
                [(t, figures["reclaimer_passes"])],
            ),
            (
                "jobctl_notifications_failed_total",
                "counter",
                "Notifications the table's reclaimers failed to deliver or dropped (--notify), "
                "since each started.",
                [(t, figures.get("notices_failed", 0))],
            ),
        ]
    if figures.get("reclaimer_last_pass"):  # no series when no reclaimer ever passed
        families.append(
            (
                "jobctl_reclaimer_last_pass_timestamp_seconds",
                "gauge",
                "When a reclaimer last finished a pass on the table (Unix time; no series "
                "when none ever did: jobctl_reclaimer_passes_total says 0).",
                [(t, float(figures["reclaimer_last_pass"]))],
            )
        )
    return families


def _lease_families(figures: Row, t: str) -> list[Family]:
    """The processing jobs' leases: stuck, the oldest expired, by state, expiring soon."""
    return [
        (
            "jobctl_stuck_jobs",
            "gauge",
            "Processing jobs whose lease expired.",
            [
                (f'{t},policy="auto"', figures["stuck_auto"]),
                (f'{t},policy="manual"', figures["stuck_manual"]),
            ],
        ),
        (
            "jobctl_oldest_expired_lease_seconds",
            "gauge",
            "How long the oldest expired lease has been expired (0 when none).",
            [(t, figures["oldest_expired_s"])],
        ),
        (
            "jobctl_processing_jobs",
            "gauge",
            "Processing jobs by lease state (none: claimed by code that sets no lease, which "
            "reclaim never touches).",
            [
                (f'{t},lease="live"', figures["live"]),
                (f'{t},lease="expired"', figures["stuck_auto"] + figures["stuck_manual"]),
                (f'{t},lease="none"', figures["no_lease"]),
            ],
        ),
        (
            "jobctl_oldest_no_lease_claim_seconds",
            "gauge",
            "How long ago the longest-claimed processing job with no lease was claimed "
            "(0 when none).",
            [(t, figures.get("oldest_no_lease_claimed_s", 0.0))],
        ),
        (
            "jobctl_expiring_soon_jobs",
            "gauge",
            "Live leases in the last third of their length (within "
            "jobctl_expiring_within_seconds when --expiring-within sets a window).",
            [(t, figures["expiring_soon"])],
        ),
    ]


def _queue_families(figures: Row, t: str) -> list[Family]:
    """What reclaim did lately, what waits for a human, and the jobs ready to run."""
    return [
        (
            "jobctl_recent_reclaims",
            "gauge",
            "Reclaims recorded in the last jobctl_reclaim_window_seconds (a counter: "
            "jobctl_reclaims_total).",
            [(t, figures["reclaims"])],
        ),
        (
            "jobctl_manual_review_jobs",
            "gauge",
            "Jobs awaiting a human whose effective policy is manual (by their row, kind or "
            "queue): reclaim parked them (failed, or the park status).",
            [(t, figures["awaiting"])],
        ),
        (
            "jobctl_awaiting_review_jobs",
            "gauge",
            "Jobs waiting for a human: reclaim failed or parked them (manual policy, "
            "attempts exhausted, or claimed too long ago) and nobody acted since (jobctl review).",
            [(t, figures["awaiting_review"])],
        ),
        (
            "jobctl_ready_jobs",
            "gauge",
            "Jobs ready to run: queued, available and not claimed.",
            [(t, figures["ready"])],
        ),
        (
            "jobctl_oldest_ready_job_seconds",
            "gauge",
            "How long the oldest job ready to run has waited since it became available "
            "(0 when none).",
            [(t, float(figures["oldest_ready_s"] or 0.0))],
        ),
    ]
