"""The OpenMetrics text and the alert thresholds, from figures made by hand."""

from __future__ import annotations

import datetime as dt

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from jobctl.ops import metrics
from jobctl.render import openmetrics

FIGURES = {
    "stuck_auto": 3,
    "stuck_manual": 1,
    "oldest_expired_s": 125.5,
    "live": 7,
    "no_lease": 0,
    "expiring_soon": 2,
    "reclaims": 5,
    "awaiting": 1,
    "awaiting_review": 2,
    "ready": 6,
    "oldest_ready_s": 2400.5,
    "expiring_within_s": 30.0,
    "reclaim_window_s": 300.0,
}


def test_openmetrics_parses_and_escapes_the_table_label():
    text = openmetrics.exposition(FIGURES, 'queue."we\\ird"')
    assert text.endswith("# EOF\n")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    table = ("table", 'queue."we\\ird"')
    assert samples[("jobctl_stuck_jobs", (("policy", "auto"), table))] == 3
    assert samples[("jobctl_processing_jobs", (("lease", "expired"), table))] == 4
    assert samples[("jobctl_oldest_expired_lease_seconds", (table,))] == 125.5
    assert samples[("jobctl_recent_reclaims", (table, ("window_seconds", "300")))] == 5
    assert samples[("jobctl_awaiting_review_jobs", (table,))] == 2
    assert samples[("jobctl_ready_jobs", (table,))] == 6
    assert samples[("jobctl_oldest_ready_job_seconds", (table,))] == 2400.5
    empty = openmetrics.exposition(FIGURES | {"ready": 0, "oldest_ready_s": None}, "jobs")
    assert 'jobctl_oldest_ready_job_seconds{table="jobs"} 0.0' in empty


def test_breaches():
    assert metrics.breaches(FIGURES, max_stuck=None, max_overdue=None) == []
    assert metrics.breaches(FIGURES, max_stuck=4, max_overdue=dt.timedelta(minutes=5)) == []
    assert metrics.breaches(FIGURES, max_stuck=3, max_overdue=dt.timedelta(minutes=2)) == [
        "4 stuck jobs > --max-stuck 3",
        "oldest expired lease 126s > --max-overdue 120s",
    ]
