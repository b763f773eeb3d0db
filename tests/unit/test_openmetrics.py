"""The OpenMetrics text and the alert thresholds, from figures made by hand."""

from __future__ import annotations

import datetime as dt

import prometheus
import pytest

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
    "reclaims_total": 42,
}


def test_exposition_parses_and_escapes_the_table_label():
    text = openmetrics.exposition(FIGURES, 'queue."we\\ird"', collected_at=1767225600.0)
    assert text.endswith("# EOF\n")
    samples = prometheus.samples(text)
    table = ("table", 'queue."we\\ird"')
    assert samples[("jobctl_up", ())] == 1
    assert samples[("jobctl_collected_timestamp_seconds", ())] == 1767225600.0
    assert samples[("jobctl_stuck_jobs", (("policy", "auto"), table))] == 3
    assert samples[("jobctl_processing_jobs", (("lease", "expired"), table))] == 4
    assert samples[("jobctl_oldest_expired_lease_seconds", (table,))] == 125.5
    assert samples[("jobctl_recent_reclaims", (table,))] == 5  # no window label
    assert samples[("jobctl_reclaim_window_seconds", (table,))] == 300
    assert samples[("jobctl_expiring_soon_jobs", (table,))] == 2
    assert samples[("jobctl_expiring_within_seconds", (table,))] == 30
    assert samples[("jobctl_reclaims_total", (table,))] == 42
    assert samples[("jobctl_awaiting_review_jobs", (table,))] == 2
    assert samples[("jobctl_ready_jobs", (table,))] == 6
    assert samples[("jobctl_oldest_ready_job_seconds", (table,))] == 2400.5
    assert prometheus.families(text)["jobctl_reclaims"].type == "counter"
    empty = openmetrics.exposition(FIGURES | {"ready": 0, "oldest_ready_s": None}, "jobs")
    assert 'jobctl_oldest_ready_job_seconds{table="jobs"} 0.0' in empty


def test_no_label_holds_an_option_value_or_the_servers_role():
    text = openmetrics.exposition(FIGURES | {"replica_lag_s": 1.5, "standby": 1}, "jobs")
    names = {name for name, labels in prometheus.samples(text) for name in [name]}
    labels = {key for _, pairs in prometheus.samples(text) for key, _ in pairs}
    assert labels == {"table", "policy", "lease"}  # where a series is, never how it was read
    assert "jobctl_server_standby" in names and "jobctl_replica_lag_seconds" in names


def test_a_target_labels_every_sample_and_says_up():
    text = openmetrics.exposition(FIGURES, "public.jobs", target="search", collected_at=1.0)
    samples = prometheus.samples(text)
    assert all(dict(labels).get("target") == "search" for _, labels in samples)
    assert samples[("jobctl_up", (("target", "search"),))] == 1
    assert samples[("jobctl_target_up", (("target", "search"),))] == 1


@pytest.mark.parametrize("target", [None, "search"])
def test_a_database_down_is_up_0(target):
    text = openmetrics.down(target, collected_at=2.0)
    labels = () if target is None else (("target", target),)
    samples = prometheus.samples(text)
    assert samples[("jobctl_up", labels)] == 0 and text.endswith("# EOF\n")
    assert (("jobctl_target_up", labels) in samples) is (target is not None)


@pytest.mark.parametrize(
    "text",
    [
        openmetrics.exposition(FIGURES | {"replica_lag_s": 0.0, "standby": 0}, "public.jobs"),
        openmetrics.exposition(FIGURES, "public.jobs", target="search", collected_at=1.0),
        openmetrics.down("search", collected_at=1.0),
        openmetrics.down(None),
        openmetrics.exposition_across(
            [("a", ("public.jobs", FIGURES)), ("b", ("public.jobs", FIGURES))],
            {"a": True, "b": True, "c": False},
            collected_at=1.0,
        ),
        openmetrics.exposition(
            FIGURES
            | {
                "groups": {
                    "kind": [
                        {
                            "kind": "other",
                            "bucket": "value",
                            "stuck": 1,
                            "processing": 0,
                            "ready": 0,
                            "awaiting_review": 0,
                        },
                        {
                            "kind": "other",
                            "bucket": "rest",
                            "stuck": 2,
                            "processing": 0,
                            "ready": 0,
                            "awaiting_review": 0,
                        },
                    ]
                }
            },
            "public.jobs",
        ),
    ],
    ids=["one", "target", "target-down", "down", "across", "kinds"],
)
def test_promtool_check_metrics_accepts_every_exposition(text):
    prometheus.check_metrics(text)


def test_breaches():
    assert metrics.breaches(FIGURES, max_stuck=None, max_overdue=None) == []
    assert metrics.breaches(FIGURES, max_stuck=4, max_overdue=dt.timedelta(minutes=5)) == []
    assert metrics.breaches(FIGURES, max_stuck=3, max_overdue=dt.timedelta(minutes=2)) == [
        "4 stuck jobs > --max-stuck 3",
        "oldest expired lease 126s > --max-overdue 120s",
    ]


def _group(kind, stuck, processing=0, ready=0, awaiting_review=0):
    return {
        "kind": kind,
        "stuck": stuck,
        "processing": processing,
        "ready": ready,
        "awaiting_review": awaiting_review,
    }


def test_a_kind_named_other_or_none_is_never_a_duplicate_series():
    """A kind really named ``other`` among the top ones, ``none`` beside
    NULL, and the rest: each its own series, which Prometheus parses without a duplicate."""
    groups = [
        _group("other", 9),
        _group("none", 8),
        _group(None, 7),
        _group("email", 6),
        _group("b", 1),
        _group("c", 1),
    ]
    figures = FIGURES | {"groups": {"kind": metrics.bounded(groups, "kind", 4)}}
    text = openmetrics.exposition(figures, "public.jobs")
    assert prometheus.duplicate_series(text) == []
    samples = prometheus.samples(text)

    def stuck(kind, bucket):
        labels = (("bucket", bucket), ("kind", kind), ("state", "stuck"), ("table", "public.jobs"))
        return samples[("jobctl_jobs_by_kind", labels)]

    assert stuck("other", "value") == 9 and stuck("other", "rest") == 2
    assert stuck("none", "value") == 8 and stuck("none", "null") == 7
    assert stuck("email", "value") == 6


def test_groups_that_read_the_same_as_text_are_summed_into_one_series():
    groups = [_group("1", 3), _group(1, 2), _group("x", 1)]
    kept = metrics.bounded(groups, "kind", 10)
    assert [(g["kind"], g["bucket"], g["stuck"]) for g in kept] == [
        ("1", "value", 5),
        ("x", "value", 1),
    ]
    text = openmetrics.exposition(FIGURES | {"groups": {"kind": kept}}, "jobs")
    assert prometheus.duplicate_series(text) == []


def test_duplicate_series_finds_a_series_twice():
    text = 'a{x="1"} 1\na{x="1"} 2\n# EOF\n'
    assert prometheus.duplicate_series(text) == [("a", (("x", "1"),))]
