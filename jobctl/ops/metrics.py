"""jobctl metrics: lease health in the OpenMetrics text format, with alert thresholds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from jobctl.db.session import Session
from jobctl.render.rows import Row


def collect(s: Session, *, expiring_within: dt.timedelta, reclaim_window: dt.timedelta) -> Row:
    """The figures: stuck jobs by policy, oldest expired lease, live/expiring, reclaims, review."""
    return (
        s.one("metrics_leases", {"soon": expiring_within})
        | s.one("metrics_reclaims", {"window": reclaim_window, "job_table": s.table.qualified})
        | s.one("metrics_manual_review")
        | s.one("review_count")
        | s.one("queue_ready")
        | {
            "expiring_within_s": expiring_within.total_seconds(),
            "reclaim_window_s": reclaim_window.total_seconds(),
        }
    )


def _label(value: str) -> str:
    """A label value escaped as OpenMetrics wants: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


Family = tuple[str, str, str, list[tuple[str, Any]]]  # name, type, help, (labels, value)s


def openmetrics(figures: Row, table: str) -> str:
    """The figures as OpenMetrics text (also valid Prometheus text), ending in # EOF."""
    return _text(_families(figures, f'table="{_label(table)}"'))


def openmetrics_across(found: Sequence[tuple[str, tuple[str, Row]]], up: dict[str, bool]) -> str:
    """The figures of several targets (name, (table, figures)) as one exposition: every sample
    labelled with its target; ``jobctl_target_up`` says which targets answered (``up``)."""
    merged: dict[str, Family] = {}
    for target, (table, figures) in found:
        for name, kind, help_text, samples in _families(
            figures, f'target="{_label(target)}",table="{_label(table)}"'
        ):
            merged.setdefault(name, (name, kind, help_text, []))[3].extend(samples)
    answered: Family = (
        "jobctl_target_up",
        "gauge",
        "1 when the target answered this scrape, 0 when it failed (down, no schema, timeout).",
        [(f'target="{_label(name)}"', int(ok)) for name, ok in up.items()],
    )
    return _text([answered, *merged.values()])


def _text(families: Sequence[Family]) -> str:
    lines = []
    for name, kind, help_text, samples in families:
        lines += [f"# TYPE {name} {kind}", f"# HELP {name} {help_text}"]
        lines += [f"{name}{{{labels}}} {value!r}" for labels, value in samples]
    return "\n".join([*lines, "# EOF"]) + "\n"


def _families(figures: Row, t: str) -> list[Family]:
    """The metric families of one table's figures, each sample's labels starting ``t``."""
    window = f'window_seconds="{figures["reclaim_window_s"]:g}"'
    soon = f'within_seconds="{figures["expiring_within_s"]:g}"'
    families: list[Family] = [
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
            "Processing jobs by lease state.",
            [
                (f'{t},lease="live"', figures["live"]),
                (f'{t},lease="expired"', figures["stuck_auto"] + figures["stuck_manual"]),
                (f'{t},lease="none"', figures["no_lease"]),
            ],
        ),
        (
            "jobctl_expiring_soon_jobs",
            "gauge",
            "Live leases that expire within the window.",
            [(f"{t},{soon}", figures["expiring_soon"])],
        ),
        (
            "jobctl_recent_reclaims",
            "gauge",
            "Reclaims recorded in the last window.",
            [(f"{t},{window}", figures["reclaims"])],
        ),
        (
            "jobctl_manual_review_jobs",
            "gauge",
            "Manual-policy jobs reclaim parked (failed, or the park status), awaiting a human.",
            [(t, figures["awaiting"])],
        ),
        (
            "jobctl_awaiting_review_jobs",
            "gauge",
            "Jobs waiting for a human: reclaim failed or parked them (manual policy or "
            "attempts exhausted) and nobody acted since (jobctl review).",
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
    if "replica_lag_s" in figures:  # replica.figures: where the figures were read
        families.append(
            (
                "jobctl_replica_lag_seconds",
                "gauge",
                "How far behind its primary the server read is (0 on a primary, -1 unknown).",
                [(f'{t},standby="{figures["standby"]}"', figures["replica_lag_s"])],
            )
        )
    return families


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
