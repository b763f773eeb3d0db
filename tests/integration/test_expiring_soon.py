"""Expiring soon is measured against each lease: a live lease in the last third of its
length (from its last extension to its expiry), one statement block (lease_soon_window) read
by summary, top, metrics, stuck --expiring, show and explain. Real leases of different
lengths, claimed and extended by the worker API; time passing is the lease times moved back
as a clock would (the row exactly as the worker left it, earlier)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import prometheus
import psycopg
import pytest
from helpers import add_jobs

from jobctl import db, lease
from jobctl.ops import console, sessions

# name -> (lease seconds, seconds since the worker last extended it; None: the claim and
# heartbeat times unknown, so no length: the 30 s fallback). Every lease keeps its state for
# 10 s at least (a loaded machine), but the three 6 s ones (4 s), read first, then completed
LEASES = {
    "six_a": (6, 0),  # three 6 s leases just extended: live, not expiring
    "six_b": (6, 0),
    "six_c": (6, 0),
    "fifteen": (15, 0),  # 15 s left of 15: live (a 30 s window says expiring)
    "late": (60, 45),  # 15 s left of 60: expiring
    "long": (300, 10),  # 290 s left of 300: live
    "long_late": (300, 250),  # 50 s left of 300: expiring (a 30 s window says live)
    "unknown": (20, None),  # 20 s left, no start: the 30 s fallback says expiring
    "gone": (6, 60),  # expired
}
SIX = {"six_a", "six_b", "six_c"}
EXPIRING = {"late", "long_late", "unknown"}
LIVE = {"fifteen", "long"}


def _leases(conn: Any, c: Any, names: set[str]) -> tuple[dict[str, int], dict[str, Any]]:
    """The leases ``names`` names, each claimed and extended by a worker of its own: the
    jobs' ids, and the workers with their claims (to complete them); ``c``: the workers'
    connection."""
    ids, held = {}, {}
    for name, (seconds, ago) in LEASES.items():
        if name not in names:
            continue
        job_id = add_jobs(conn, 1)[0]
        worker = lease.Worker(c, f"w-{name}", lease_seconds=seconds)
        claim = worker.claim()
        assert claim is not None and claim.id == job_id
        worker.heartbeat(claim)
        ids[name], held[name] = job_id, (worker, claim)
        if ago is None:
            conn.execute(
                "UPDATE jobs SET reserved_at = NULL, heartbeat_at = NULL WHERE id = %s",
                (job_id,),
            )
        elif ago:
            conn.execute(
                "UPDATE jobs SET reserved_at = reserved_at - %(ago)s, "
                "heartbeat_at = heartbeat_at - %(ago)s, "
                "lease_expires_at = lease_expires_at - %(ago)s WHERE id = %(id)s",
                {"ago": dt.timedelta(seconds=ago), "id": job_id},
            )
    return ids, held


def _json(run: Any, *args: str) -> Any:
    result = run(*args, "-o", "json")
    assert result.code == 0, (args, result.err)
    return json.loads(result.out)


@pytest.fixture
def workers(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


def test_every_view_measures_expiring_soon_against_the_lease(conn, dsn, run, workers):
    ids, held = _leases(conn, workers, set(LEASES))
    expiring = {ids[n] for n in EXPIRING}
    live = {ids[n] for n in LIVE}

    summary = _json(run, "summary")
    assert summary["processing"] == {
        "live": len(LIVE) + len(SIX),
        "expiring_soon": len(EXPIRING),
        "expired": 1,
        "no_lease": 0,
    }
    assert summary["expiring_within_s"] is None
    for name in SIX:  # done: the rest holds its state for 10 s
        worker, claim = held[name]
        worker.complete(claim)
    by_worker = _json(run, "summary", "--by", "worker")["groups"]
    assert sum(g["expiring_soon"] for g in by_worker) == len(EXPIRING)
    assert {g["worker"] for g in by_worker if g["expiring_soon"]} == {f"w-{n}" for n in EXPIRING}

    samples = prometheus.samples(run("metrics").out)
    table = ("table", "public.jobs")
    assert samples[("jobctl_expiring_soon_jobs", (table,))] == len(EXPIRING)
    assert ("jobctl_expiring_within_seconds", (table,)) not in samples  # no window

    stuck = _json(run, "stuck", "--expiring")
    assert {int(r["id"]) for r in stuck if r["lease_state"] == "expiring"} == expiring
    assert {int(r["id"]) for r in stuck if r["lease_state"] == "expired"} == {ids["gone"]}

    settings = db.Settings(dsn=dsn, actor="tester@ci")
    with sessions.open(settings, sessions.Access("top"), say=lambda line: None) as (s, standing):
        snap = console.refresh(s, standing, console.Ask(None, limit=100))
    assert snap.expiring == len(EXPIRING) and snap.expired == 1
    assert {int(r["id"]) for r in snap.stuck if r["lease_state"] == "expiring"} == expiring

    for job_id in expiring | live:
        shown = _json(run, "show", str(job_id))
        assert shown["lease_state"] == "live"
        assert shown["lease_expiring_soon"] is (job_id in expiring), job_id
        story = " ".join(_json(run, "explain", str(job_id))["story"])
        assert ("in the last third of its length" in story) is (job_id in expiring), story


def test_an_explicit_window_stays_a_window(conn, run, workers):
    ids, _ = _leases(conn, workers, set(LEASES) - SIX)
    within = {n for n, (seconds, ago) in LEASES.items() if seconds - (ago or 0) in range(1, 30)}
    within -= SIX
    assert within == {"fifteen", "late", "unknown"}
    summary = _json(run, "summary", "--expiring-within", "30s")
    assert summary["processing"]["expiring_soon"] == len(within)
    assert summary["expiring_within_s"] == 30.0
    samples = prometheus.samples(run("metrics", "--expiring-within", "30s").out)
    table = ("table", "public.jobs")
    assert samples[("jobctl_expiring_soon_jobs", (table,))] == len(within)
    assert samples[("jobctl_expiring_within_seconds", (table,))] == 30.0
    stuck = _json(run, "stuck", "--expiring-within", "30s")
    assert {int(r["id"]) for r in stuck if r["lease_state"] == "expiring"} == {
        ids[n] for n in within
    }
    refused = run("stuck", "--expiring", "--expiring-within", "30s")
    assert refused.code != 0 and "give one" in refused.err
