"""``jobctl metrics``' exposition: lease health (``ops.metrics.collect``'s figures) in the
OpenMetrics text format, also valid Prometheus text, ending in ``# EOF``. Pure: no database,
no printing. Example::

    sys.stdout.write(openmetrics.exposition(metrics.collect(s, ...), s.table.qualified))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobctl.render.rows import Row

Family = tuple[str, str, str, list[tuple[str, Any]]]  # name, type, help, (labels, value)s


def _label(value: str) -> str:
    """A label value escaped as OpenMetrics wants: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(figures: Row, table: str) -> str:
    """The figures as OpenMetrics text (also valid Prometheus text), ending in # EOF."""
    return _text(_families(figures, f'table="{_label(table)}"'))


def exposition_across(found: Sequence[tuple[str, tuple[str, Row]]], up: dict[str, bool]) -> str:
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
    families = [*_lease_families(figures, t), *_queue_families(figures, t)]
    for by, groups in (figures.get("groups") or {}).items():  # kind, queue: when mapped
        families.append(
            (
                f"jobctl_jobs_by_{by}",
                "gauge",
                f"Jobs by {by} (the mapped column) and state: stuck (lease expired), "
                "processing, ready, awaiting_review; the top ones by count, the rest as "
                f'{by}="other" (metrics --label-top).',
                [
                    (f'{t},{by}="{_label(str(g[by]))}",state="{state}"', g[state])
                    for g in groups
                    for state in ("stuck", "processing", "ready", "awaiting_review")
                ],
            )
        )
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


def _lease_families(figures: Row, t: str) -> list[Family]:
    """The processing jobs' leases: stuck, the oldest expired, by state, expiring soon."""
    soon = f'within_seconds="{figures["expiring_within_s"]:g}"'
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
    ]


def _queue_families(figures: Row, t: str) -> list[Family]:
    """What reclaim did lately, what waits for a human, and the jobs ready to run."""
    window = f'window_seconds="{figures["reclaim_window_s"]:g}"'
    return [
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
