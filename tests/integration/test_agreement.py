"""Every command judges a job as reclaim does: one definition of each judgement (the effective
policy, the lease state, reclaim's action, "awaits a human"), read by every view of it.

Tables of seeded random states — row, kind and queue policies, attempts used, live, expired and
lease-less claims, jobs a worker failed, jobs done — against an oracle written here in Python
from the lease design's rules. For every job: stuck's action = the dry run's = what the commit
did = the oracle's; after the commit, the review set = summary's count = the metrics gauges
(totals and by kind and queue) = the report's count = top's review view, and explain names
the same policy and reason. Then a kind's policy is removed: the jobs it parked still await a
human (why: parked), in every view.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from typing import Any

import prometheus
import pytest

from jobctl import db
from jobctl.ops import console, sessions

KINDS = ("charge_card", "send_email", "resize_image")
QUEUES = ("payments", "mail", "media")
STATES = ("queued", "live", "expired", "expired", "expired", "no_lease", "done", "worker_failed")
JOBS = 90
RECLAIM_ERROR = "lease expired before completion"


def _job(rng: random.Random) -> dict[str, Any]:
    max_attempts = rng.choice((1, 3, 5))
    state = rng.choice(STATES)
    lowest = 1 if state in ("live", "expired", "no_lease") else 0
    return {
        "kind": rng.choice(KINDS),
        "queue": rng.choice(QUEUES),
        "policy": rng.choice(("auto", "auto", "manual")),
        "state": state,
        "max_attempts": max_attempts,
        "attempts": rng.randint(lowest, max_attempts),
        "claimed_ago_s": rng.choice((30, 600, 3 * 3600)),
    }


def _seed_table(conn: Any, run: Any, rng: random.Random) -> dict[int, dict[str, Any]]:
    """The table: kind and queue mapped, JOBS jobs in random states, written as the
    application would (the history records them as its own transitions)."""
    conn.execute("ALTER TABLE jobs ADD COLUMN kind text")
    applied = run("schema", "apply", "--column", "kind=kind", "--column", "queue=queue", "--yes")
    assert applied.code == 0, applied.err
    jobs: dict[int, dict[str, Any]] = {}
    for _ in range(JOBS):
        job = _job(rng)
        state = job["state"]
        row = conn.execute(
            """
            INSERT INTO jobs (kind, queue, recovery_policy, attempts, max_attempts, status,
                              reserved_by, reserved_at, attempt_token, lease_expires_at,
                              heartbeat_at, last_error, finished_at)
            VALUES (%(kind)s, %(queue)s, %(policy)s, %(attempts)s, %(max_attempts)s,
                    %(status)s, %(worker)s, now() - %(claimed)s * interval '1 s', %(token)s,
                    now() + %(lease)s * interval '1 s', NULL, %(error)s, %(finished)s)
            RETURNING id
            """,
            {
                **job,
                "status": {"live": "processing", "expired": "processing"}.get(
                    state,
                    {"no_lease": "processing", "worker_failed": "failed"}.get(state, state),
                ),
                "worker": f"w{rng.randint(1, 4)}"
                if state in ("live", "expired", "no_lease")
                else None,
                "claimed": job["claimed_ago_s"],
                "token": __import__("uuid").uuid4() if state in ("live", "expired") else None,
                "lease": {"live": 3600, "expired": -rng.randint(5, 900)}.get(
                    state, 3600 if state == "no_lease" and rng.random() < 0.5 else None
                ),
                "error": "boom" if state == "worker_failed" else None,
                "finished": dt.datetime.now(dt.timezone.utc)
                if state in ("done", "worker_failed")
                else None,
            },
        ).fetchone()
        jobs[row["id"]] = job
    return jobs


def _set_policies(run: Any, rng: random.Random) -> tuple[set[str], set[str]]:
    """A random kind and queue made manual by a recorded policy (manual wins over the row)."""
    kinds = set(rng.sample(KINDS, rng.randint(1, 2)))
    queues = set(rng.sample(QUEUES, 1))
    for kind in sorted(kinds):
        assert run("policy", "--kind", kind, "--manual", "--reason", "provider down").code == 0
    for queue in sorted(queues):
        assert run("policy", "--queue", queue, "--manual", "--reason", "provider down").code == 0
    return kinds, queues


def _oracle_policy(job: dict[str, Any], kinds: set[str], queues: set[str]) -> tuple[str, str]:
    if job["policy"] == "manual":
        return "manual", "row"
    if job["kind"] in kinds:
        return "manual", "kind"
    if job["queue"] in queues:
        return "manual", "queue"
    return "auto", "row"


def _oracle_action(job: dict[str, Any], policy: str, park_older_than_s: int | None) -> str:
    too_old = park_older_than_s is not None and job["claimed_ago_s"] > park_older_than_s
    if policy == "auto" and job["attempts"] < job["max_attempts"] and not too_old:
        return "requeue"
    return "fail"


def _oracle_why(job: dict[str, Any], policy: str) -> str:
    if policy == "manual":
        return "manual_policy"
    if job["attempts"] >= job["max_attempts"]:
        return "attempts_exhausted"
    return "parked"


def _json(run: Any, *args: str) -> Any:
    result = run(*args, "-o", "json")
    assert result.code in (0, 4), (args, result.err)
    return json.loads(result.out)


def _top_review(dsn: str) -> tuple[set[int], int]:
    """What `jobctl top` shows in its review view: its rows and its strip's count."""
    settings = db.Settings(dsn=dsn, actor="tester@ci")
    with sessions.open(settings, sessions.Access("top"), say=lambda line: None) as (s, standing):
        ask = console.Ask(dt.timedelta(seconds=30), limit=500, view="review")
        snap = console.refresh(s, standing, ask)
    return {int(r["id"]) for r in snap.review}, snap.awaiting_review


def _review_views(run: Any, dsn: str) -> dict[str, Any]:
    """Every view of the review queue, each as the command prints it."""
    review = _json(run, "review", "--limit", "1000")
    summary = _json(run, "summary")
    report = _json(run, "report", "--since", "1h")
    metrics = run("metrics")
    assert metrics.code == 0, metrics.err
    samples = prometheus.samples(metrics.out)
    table = ("table", "public.jobs")
    by = {
        dim: {
            dict(labels)[dim]: value
            for (name, labels), value in samples.items()
            if name == f"jobctl_jobs_by_{dim}" and dict(labels).get("state") == "awaiting_review"
        }
        for dim in ("kind", "queue")
    }
    top_ids, top_count = _top_review(dsn)
    return {
        "review": {int(r["id"]): r for r in review},
        "summary": summary["awaiting_review"],
        "report": report["awaiting_review"],
        "metrics": samples[("jobctl_awaiting_review_jobs", (table,))],
        "metrics_manual": samples[("jobctl_manual_review_jobs", (table,))],
        "metrics_by": by,
        "summary_by": {
            dim: {
                g[dim]: g["awaiting_review"] for g in _json(run, "summary", "--by", dim)["groups"]
            }
            for dim in ("kind", "queue")
        },
        "top_ids": top_ids,
        "top_count": top_count,
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_command_judges_a_job_as_reclaim_does(conn, dsn, run, seed):
    rng = random.Random(seed)
    jobs = _seed_table(conn, run, rng)
    kinds, queues = _set_policies(run, rng)
    park = 3600 if seed == 3 else None  # one table also parks the claims older than an hour
    park_args = ["--park-older-than", "1h"] if park else []
    policies = {i: _oracle_policy(j, kinds, queues) for i, j in jobs.items()}
    expired = {i for i, j in jobs.items() if j["state"] == "expired"}
    expected = {i: _oracle_action(jobs[i], policies[i][0], park) for i in expired}
    shown = {i: _oracle_action(jobs[i], policies[i][0], None) for i in expired}  # stuck's

    # before: stuck, the dry run and the oracle agree on every expired job
    stuck = {int(r["id"]): r for r in _json(run, "stuck", "--limit", "1000")}
    assert {i for i, r in stuck.items() if r["lease_state"] == "expired"} == expired
    assert {i for i, r in stuck.items() if r["lease_state"] == "none"} == {
        i for i, j in jobs.items() if j["state"] == "no_lease"
    }
    for i in expired:
        assert (stuck[i]["effective_policy"], stuck[i]["policy_from"]) == policies[i], i
        assert stuck[i]["recovery_policy"] == jobs[i]["policy"]
        assert stuck[i]["action"] == shown[i], (i, jobs[i], policies[i])
    dry = {int(r["id"]): r["action"] for r in _json(run, "reclaim", "--dry-run")}
    assert dry == shown
    if park:
        dry = {int(r["id"]): r["action"] for r in _json(run, "reclaim", *park_args)}
        assert dry == expected
    summary = _json(run, "summary")
    assert summary["processing"]["expired"] == len(expired)
    assert summary["processing"]["no_lease"] == sum(j["state"] == "no_lease" for j in jobs.values())
    samples = prometheus.samples(run("metrics").out)
    table = ("table", "public.jobs")
    manual_stuck = sum(policies[i][0] == "manual" for i in expired)
    assert samples[("jobctl_stuck_jobs", (("policy", "manual"), table))] == manual_stuck
    assert (
        samples[("jobctl_stuck_jobs", (("policy", "auto"), table))] == len(expired) - manual_stuck
    )

    # the commit does what the dry run showed
    committed = run("reclaim", "--commit", "--yes", "-o", "json", *park_args)
    assert committed.code == 0, committed.err
    done = {int(r["id"]): r["action"] for r in json.loads(committed.out) if r["applied"]}
    assert done == expected

    # after: every view of the review queue is the same set, and says the same why
    waiting = {i for i, action in expected.items() if action == "fail"}
    views = _review_views(run, dsn)
    assert set(views["review"]) == waiting
    for i in waiting:
        row = views["review"][i]
        assert row["why"] == _oracle_why(jobs[i], policies[i][0]), (i, jobs[i])
        assert (row["effective_policy"], row["policy_from"]) == policies[i]
    assert views["summary"] == len(waiting) == views["metrics"] == views["top_count"]
    assert views["top_ids"] == waiting
    assert views["report"]["jobs"] == len(waiting)
    assert views["report"]["by_why"] == dict(
        Counter(_oracle_why(jobs[i], policies[i][0]) for i in waiting)
    )
    assert views["metrics_manual"] == sum(policies[i][0] == "manual" for i in waiting)
    for dim in ("kind", "queue"):
        counted = Counter(jobs[i][dim] for i in waiting)
        assert {k: v for k, v in views["metrics_by"][dim].items() if v} == dict(counted)
        assert {k: v for k, v in views["summary_by"][dim].items() if v} == dict(counted)
    for i in sorted(waiting)[:5]:  # explain tells the same policy and reason
        story = " ".join(_json(run, "explain", str(i))["story"])
        assert "awaiting a human" in story, story
        policy, source = policies[i]
        by = f" by its {source}" if source in ("kind", "queue") else ""
        assert f"({policy} policy{by}," in story, story

    # a kind's policy removed: what it parked still awaits a human, now as "parked" (or its
    # attempts), in every view
    if kinds:
        gone = sorted(kinds)[0]
        assert run("policy", "--kind", gone, "--remove", "--reason", "provider back").code == 0
        kinds.discard(gone)
        after = _review_views(run, dsn)
        assert set(after["review"]) == waiting
        for i in waiting:
            policy = _oracle_policy(jobs[i], kinds, queues)[0]
            assert after["review"][i]["why"] == _oracle_why(jobs[i], policy), (i, jobs[i])
        assert after["summary"] == after["metrics"] == after["top_count"] == len(waiting)
        assert after["metrics_manual"] == sum(
            _oracle_policy(jobs[i], kinds, queues)[0] == "manual" for i in waiting
        )
