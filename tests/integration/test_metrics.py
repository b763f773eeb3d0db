"""metrics: OpenMetrics text parsed by prometheus_client, and the alert thresholds."""

from __future__ import annotations

from helpers import add_jobs, claim_all
from prometheus_client.openmetrics.parser import text_string_to_metric_families


def test_metrics_parse_as_openmetrics_and_thresholds(conn, dsn, run):
    add_jobs(conn, 4)
    add_jobs(conn, 2, policy="manual")
    claim_all(dsn, 3, lease_seconds=-120)
    claim_all(dsn, 1, lease_seconds=10)
    result = run("metrics")
    assert result.code == 0, result.err
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(result.out)
        for s in family.samples
    }
    table = ("table", "public.jobs")
    assert samples[("jobctl_stuck_jobs", (("policy", "auto"), table))] == 3
    assert samples[("jobctl_stuck_jobs", (("policy", "manual"), table))] == 0
    assert samples[("jobctl_oldest_expired_lease_seconds", (table,))] >= 120
    assert samples[("jobctl_expiring_soon_jobs", (table, ("within_seconds", "30")))] == 1
    breached = run("metrics", "--max-stuck", "2", "--max-overdue", "1m")
    assert breached.code == 4 and breached.err.count("CRITICAL") == 2
    assert run("metrics", "--max-stuck", "3", "--max-overdue", "1h").code == 0
    assert run("reclaim", "--commit", "--yes").code == 0
    after = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(run("metrics").out)
        for s in family.samples
    }
    assert after[("jobctl_recent_reclaims", (table, ("window_seconds", "300")))] == 3
    assert after[("jobctl_oldest_expired_lease_seconds", (table,))] == 0
