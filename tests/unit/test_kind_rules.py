"""What the job is, pure rules: the kind and queue mapping, the paced return, and the bounded
label set of metrics (the --kind/--queue/--error slice itself: test_slices.py)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from jobctl import errors
from jobctl.ops import manual, metrics
from jobctl.table.mapping import TableMapping


def test_kind_and_queue_are_optional_mapped_columns():
    m = TableMapping.parse(columns=["kind=job_class", "queue=queue", "status=state"])
    assert m.optional("kind") == "job_class" and m.optional("queue") == "queue"
    assert m.mapped_optional == ("kind", "queue")
    assert m.column("status") == "state"
    assert "kind = job_class" in m.describe() and "queue = queue" in m.describe()
    assert TableMapping.from_json(json.loads(m.to_json())) == m
    assert TableMapping().mapped_optional == ()


def test_a_kind_on_a_design_column_is_refused():
    with pytest.raises(errors.UsageError, match="both be the column"):
        TableMapping.parse(columns=["kind=status"])
    with pytest.raises(errors.UsageError, match="kind=COLUMN"):
        TableMapping.parse(columns=["kind="])


def test_paced_delays_are_even_with_jitter():
    delays = manual.paced(dt.timedelta(seconds=5), dt.timedelta(minutes=10), 10)
    assert [int((d - dt.timedelta(seconds=5)).total_seconds() // 60) for d in delays] == list(
        range(10)
    )
    assert len(set(delays)) == 10
    assert manual.paced(dt.timedelta(0), dt.timedelta(0), 3) == [dt.timedelta(0)] * 3


def test_metrics_labels_are_bounded_the_rest_as_other():
    groups = [
        {"kind": f"k{n}", "stuck": n, "processing": n, "ready": 0, "awaiting_review": 0}
        for n in range(30)
    ] + [{"kind": None, "stuck": 0, "processing": 0, "ready": 100, "awaiting_review": 0}]
    kept = metrics.bounded(groups, "kind", 3)
    assert [g["kind"] for g in kept] == ["none", "k29", "k28", "other"]
    assert kept[-1]["stuck"] == sum(range(28))
    assert metrics.bounded(groups[:2], "kind", 3)[-1]["kind"] != "other"
