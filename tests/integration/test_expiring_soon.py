"""Expiring soon is measured against each lease: a live lease in the last third of its
length (from its last extension to its expiry), one statement block (lease_soon_window) read
by summary, top, metrics, stuck --expiring, show and explain. Real leases of different
lengths, claimed and extended by the worker API; time passing is the lease times moved back
as a clock would (the row exactly as the worker left it, earlier)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import prometheus
import psycopg
from helpers import add_jobs

from jobctl import db, lease
from jobctl.ops import console, sessions

# name -> (lease seconds, seconds since the worker last extended it; None: the claim and
# heartbeat times unknown, so no length: the 30 s fallback)
LEASES = {
    "six_a": (6, 0),  # three 6 s leases just extended: live, not expiring
    "six_b": (6, 0),
    "six_c": (6, 0),
    "six_late": (6, 5),  # 1 s left of 6: expiring
    "long": (300, 10),  # 290 s left of 300: live
    "long_late": (300, 250),  # 50 s left of 300: expiring (a 30 s window says live)
    "half": (30, 15),  # 15 s left of 30: live (a 30 s window says expiring)
    "unknown": (20, None),  # 20 s left, no start: the 30 s fallback says expiring
    "gone": (6, 60),  # expired
}
EXPIRING = {"six_late", "long_late", "unknown"}
LIVE = {"six_a", "six_b", "six_c", "long", "half"}


def _leases(conn: Any, dsn: str) -> dict[str, int]:
    ids = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        for name, (seconds, ago) in LEASES.items():
            job_id = add_jobs(conn, 1)[0]
            worker = lease.Worker(c, f"w-{name}", lease_seconds=seconds)
            claim = worker.claim()
            assert claim is not None and claim.id == job_id
            worker.heartbeat(claim)
            ids[name] = job_id
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
    return ids


def _json(run: Any, *args: str) -> Any:
    result = run(*args, "-o", "json")
    assert result.code == 0, (args, result.err)
    return json.loads(result.out)


def test_every_view_measures_expiring_soon_against_the_lease(conn, dsn, run):
    ids = _leases(conn, dsn)
    expiring = {ids[n] for n in EXPIRING}
    live = {ids[n] for n in LIVE}

    processing = _json(run, "summary")["processing"]
    assert processing == {
        "live": len(LIVE),
        "expiring_soon": len(EXPIRING),
        "expired": 1,
        "no_lease": 0,
    }
    assert _json(run, "summary")["expiring_within_s"] is None
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


def test_an_explicit_window_stays_a_window(conn, dsn, run):
    ids = _leases(conn, dsn)
    within = {n for n, (seconds, ago) in LEASES.items() if seconds - (ago or 0) in range(1, 30)}
    assert within == {"six_a", "six_b", "six_c", "six_late", "half", "unknown"}
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
