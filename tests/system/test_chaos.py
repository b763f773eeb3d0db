"""Chaos: real workers, two reclaimer services and an operator, under SIGKILL, SIGSTOP past the
lease and pg_terminate_backend; then invariants checked on a test-only audit of every
transition (Jepsen-style: record a history, then check it).

Short by default (``--chaos-seconds 12``); a long run: ``pytest tests/system/test_chaos.py -s
--chaos-seconds 600``. Prints its figures.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

LEASE_S = 1.0
WORK_S = 0.1
WORKERS = 6

AUDIT = """
CREATE TABLE chaos_audit (
    seq bigserial PRIMARY KEY, id bigint, at timestamptz DEFAULT clock_timestamp(),
    old_status text, new_status text, old_token uuid, new_token uuid,
    old_reclaims int, new_reclaims int, attempts int);
CREATE FUNCTION chaos_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_audit (id, old_status, new_status, old_token, new_token, old_reclaims,
                             new_reclaims, attempts)
    VALUES (NEW.id, OLD.status, NEW.status, OLD.attempt_token, NEW.attempt_token,
            OLD.reclaim_count, NEW.reclaim_count, NEW.attempts);
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit AFTER UPDATE ON jobs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.attempt_token IS DISTINCT FROM
          NEW.attempt_token) EXECUTE FUNCTION chaos_audit();
"""


class Chaos:
    def __init__(self, dsn: str, logs: Path, seed: int) -> None:
        self.dsn, self.logs, self.rng = dsn, logs, random.Random(seed)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.stopped: dict[str, float] = {}  # worker -> when to SIGCONT
        self.generation = 0
        self.figures: collections.Counter[str] = collections.Counter()
        self.env = {**os.environ, "JOBCTL_ACTOR": "chaos-operator@test", "JOBCTL_DSN": dsn}

    def spawn(self, prefix: str = "w") -> None:
        self.generation += 1
        name = f"{prefix}{self.generation}"
        command = [
            sys.executable,
            "-m",
            "jobctl.cli.commands.demo",
            "worker",
            self.dsn,
            name,
            str(LEASE_S),
            str(WORK_S),
            "1000000",
        ]
        with open(self.logs / f"{name}.jsonl", "w") as log:  # the child keeps its own copy
            self.workers[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.DEVNULL)

    def reclaimer(self, n: int) -> subprocess.Popen[bytes]:
        env = {**self.env, "JOBCTL_DSN": f"{self.dsn} application_name=chaos-reclaimer"}
        command = [
            sys.executable,
            "-m",
            "jobctl",
            "reclaim",
            "--commit",
            "--yes",
            "--every",
            "0.3s",
            "--batch-size",
            "20",
            "-o",
            "jsonl",
        ]
        with (
            open(self.logs / f"reclaimer{n}.jsonl", "w") as out,
            open(self.logs / f"reclaimer{n}.err", "w") as err,
        ):
            return subprocess.Popen(command, env=env, stdout=out, stderr=err)

    def fault(self, admin: psycopg.Connection[Any]) -> None:
        action = self.rng.choice(["kill", "stop", "stop", "backend"])
        running = [n for n, p in self.workers.items() if p.poll() is None and n not in self.stopped]
        if action == "kill" and running:
            name = self.rng.choice(running)
            victim = self.workers.pop(name)
            victim.kill()
            victim.wait()
            self.figures["workers SIGKILLed"] += 1
            self.spawn()
        elif action == "stop" and running:
            name = self.rng.choice(running)
            os.kill(self.workers[name].pid, signal.SIGSTOP)
            self.stopped[name] = time.monotonic() + self.rng.uniform(1.5, 3.0)
            self.figures["workers paused past their lease"] += 1
        elif action == "backend":
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity"
                " WHERE application_name = 'chaos-reclaimer' AND datname = current_database()"
                " ORDER BY random() LIMIT 1) p"
            ).fetchone()[0]
            self.figures["reclaimer backends terminated"] += killed

    def resume_due(self, everyone: bool = False) -> None:
        for name, when in list(self.stopped.items()):
            if everyone or time.monotonic() >= when:
                os.kill(self.workers[name].pid, signal.SIGCONT)
                del self.stopped[name]

    def respawn_dead(self) -> None:
        for name, proc in list(self.workers.items()):
            if proc.poll() is not None and name not in self.stopped:
                self.figures["workers that died on their own"] += 1
                del self.workers[name]
                self.spawn()


def operator(
    dsn: str, env: dict[str, str], stop: threading.Event, figures: collections.Counter[str]
) -> None:
    """A human on call: requeues parked manual jobs, now and then cancels a queued one."""
    rng = random.Random(7)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(0.7):
            cancel = rng.random() < 0.2
            row = conn.execute(
                "SELECT id FROM jobs WHERE recovery_policy = 'manual' AND "
                + ("status = 'queued'" if cancel else "status = 'failed' AND reclaim_count > 0")
                + " ORDER BY random() LIMIT 1"
            ).fetchone()
            if row is None:
                continue
            args = (
                ["fail", str(row[0]), "--reason", "chaos: cancelled"]
                if cancel
                else ["requeue", str(row[0]), "--reason", "chaos: reviewed"]
            )
            result = subprocess.run(
                [sys.executable, "-m", "jobctl", *args, "--yes", "-o", "json"],
                env=env,
                capture_output=True,
                text=True,
            )
            if result.stdout:
                figures[f"operator {args[0]}: {json.loads(result.stdout)[0]['outcome']}"] += 1
            else:  # jobctl failed as a whole: keep its one line for the report
                figures[f"operator {args[0]}: error: {result.stderr.strip()[:100]}"] += 1


def read_log(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:  # a line cut by SIGKILL
            pass
    return events


@pytest.mark.slow
def test_chaos(conn, dsn, chaos_seconds, tmp_path, capsys):
    conn.execute(AUDIT)
    n_jobs = max(200, int(chaos_seconds * 30))
    conn.execute(  # every fifth job is manual, spread through the queue
        "INSERT INTO jobs (recovery_policy, max_attempts) SELECT CASE WHEN g %% 5 = 0 "
        "THEN 'manual' ELSE 'auto' END, 3 FROM generate_series(1, %s) g",
        (n_jobs,),
    )
    chaos = Chaos(dsn, tmp_path, seed=int(os.environ.get("CHAOS_SEED", "1")))
    reclaimers = [chaos.reclaimer(1), chaos.reclaimer(2)]
    stop_operator = threading.Event()
    op = threading.Thread(target=operator, args=(dsn, chaos.env, stop_operator, chaos.figures))
    started = time.monotonic()
    try:
        for _ in range(WORKERS):
            chaos.spawn()
        op.start()
        with psycopg.connect(dsn, autocommit=True) as admin:
            deadline = time.monotonic() + chaos_seconds
            while time.monotonic() < deadline:
                time.sleep(chaos.rng.uniform(0.2, 0.5))
                chaos.resume_due()
                chaos.respawn_dead()
                chaos.fault(admin)
        # stop the load: resume the frozen (their stale completions meet the fence), then kill
        chaos.resume_due(everyone=True)
        time.sleep(LEASE_S)
        stop_operator.set()
        op.join()
        for proc in chaos.workers.values():
            proc.kill()
            proc.wait()
        chaos.workers.clear()

        def count(where: str) -> int:
            return conn.execute(f"SELECT count(*) FROM jobs WHERE {where}").fetchone()["count"]

        # let leases expire and the reclaimers clear them, then drain with well-behaved workers
        deadline = time.monotonic() + 60 + n_jobs / 20  # drain: well-behaved workers
        while count("status = 'processing'") and time.monotonic() < deadline:
            time.sleep(0.2)
        for _ in range(WORKERS):
            chaos.spawn("drain")
        while count("status IN ('queued', 'processing')") and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_operator.set()
        for proc in chaos.workers.values():
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
        for proc in reclaimers:
            proc.send_signal(signal.SIGTERM)
        for proc in reclaimers:
            proc.wait(timeout=30)

    # ------------------------------------------------------------ the checks
    assert all(p.returncode == 0 for p in reclaimers)
    for n in (1, 2):
        assert "Traceback" not in (tmp_path / f"reclaimer{n}.err").read_text()
    jobs = {r["id"]: r for r in conn.execute("SELECT * FROM jobs")}
    audit = conn.execute("SELECT * FROM chaos_audit ORDER BY seq").fetchall()
    log = [
        e
        for path in sorted(tmp_path.glob("*[0-9].jsonl"))
        if "reclaimer" not in path.name
        for e in read_log(path)
    ]

    assert len(jobs) == n_jobs, "no job lost"
    unfinished = collections.Counter(
        j["status"] for j in jobs.values() if j["status"] not in ("done", "failed")
    )
    assert not unfinished, f"every job finished: {unfinished}"

    done_transitions = collections.Counter(a["id"] for a in audit if a["new_status"] == "done")
    assert max(done_transitions.values(), default=0) <= 1, "no job completed twice"

    ended: set[Any] = set()
    current: dict[int, Any] = {}
    reclaims: collections.Counter[int] = collections.Counter()
    for a in audit:
        if a["new_token"] is not None and a["new_token"] != a["old_token"]:
            assert a["old_status"] == "queued", a  # a claim takes a queued job
            current[a["id"]] = a["new_token"]
        if a["old_status"] == "processing" and a["new_status"] != "processing":
            assert a["old_token"] == current.get(a["id"]), a  # exits carry the claim's token
            assert a["old_token"] not in ended, a  # each token ends at most once
            ended.add(a["old_token"])
        if a["new_reclaims"] > a["old_reclaims"]:
            reclaims[a["id"]] += 1
    assert all(j["reclaim_count"] == reclaims[i] for i, j in jobs.items())

    db_completions = {(a["id"], str(a["old_token"])) for a in audit if a["new_status"] == "done"}
    client_completions = {(e["id"], e["attempt_token"]) for e in log if e["event"] == "completed"}
    assert client_completions <= db_completions, "every acknowledged completion is in the DB"
    stale = [e for e in log if e["event"] == "completion_rejected"]
    assert not {(e["id"], e["attempt_token"]) for e in stale} & db_completions

    for job in jobs.values():
        if job["recovery_policy"] == "auto":
            assert job["attempts"] <= job["max_attempts"], job
            if job["status"] == "failed":
                assert job["attempts"] >= job["max_attempts"], job

    events = collections.Counter(
        r["event"] for r in conn.execute("SELECT event FROM jobctl.events")
    )
    assert events["reclaimed"] == sum(reclaims.values()), "jobctl's history saw every reclaim"
    # the default history (transitions) keeps one row per attempt that left processing other
    # than by completing (reclaimed, retried, failed), and none for a completion
    ended_otherwise = collections.Counter(
        str(a["old_token"])
        for a in audit
        if a["old_status"] == "processing" and a["new_status"] not in ("processing", "done")
    )
    recorded = conn.execute("SELECT attempt_token, outcome FROM jobctl.attempts").fetchall()
    assert collections.Counter(str(r["attempt_token"]) for r in recorded) == ended_otherwise, (
        "jobctl's history saw every attempt that did not complete, once"
    )
    assert not [r for r in recorded if r["outcome"] == "completed"], "and no completion"
    assert len(stale) > 0, "the run exercised the fence"

    figures = {
        "seconds of faults": chaos_seconds,
        "wall time (s)": round(time.monotonic() - started, 1),
        "jobs": n_jobs,
        "claims": sum(1 for a in audit if a["new_status"] == "processing"),
        **dict(sorted(chaos.figures.items())),
        "reclaims": sum(reclaims.values()),
        "stale completions rejected": len(stale),
        "stale heartbeats rejected": sum(e["event"] == "heartbeat_rejected" for e in log),
        "done": sum(j["status"] == "done" for j in jobs.values()),
        "failed": sum(j["status"] == "failed" for j in jobs.values()),
        "double completions": sum(n > 1 for n in done_transitions.values()),
        "lost jobs": n_jobs - len(jobs),
    }
    with capsys.disabled():
        print("\nchaos figures:\n" + "\n".join(f"  {k:34} {v}" for k, v in figures.items()))
