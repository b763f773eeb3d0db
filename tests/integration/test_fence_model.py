"""A model of the fence: every operator action that takes an attempt back or changes its
counters, interleaved with live workers' claims, heartbeats, completions and fails.

Two drivers share one model: a hypothesis state machine's long random interleavings, and a
small program run every way (every operator action at every point of an attempt, then
another worker's claim and completion, then the first worker's late calls: the one that
holds each action to each point, and that fails on complete judged by ``attempts``). They
drive ``WORKERS`` real ``lease.Worker``s, each on its own
autocommit connection, and jobctl's operator commands in-process (the ``run`` fixture) against
``JOBS`` jobs of the reference table. Time passing is the test's own ``UPDATE`` of
``lease_expires_at`` (and of ``reserved_at``, for ``--park-older-than``). The model keeps, per
job, which attempt (token) is live (None once anything took it back or ended it), which
attempt's completion landed, and the counters and policy reclaim decides by. After each step:

- a stale attempt's heartbeat, complete and fail raise ``lease.LeaseLost``; the live
  attempt's never do; a complete retried after a lost acknowledgement (its first call landed)
  returns, however the counters moved since (``reclaim --refund-attempt`` winds them back);
- every row's status, token, attempts, policy, reclaim count and lease agree with the model.

Where concurrency matters it is real: all the workers claim at once (threads; SKIP LOCKED
gives each its own job), and a live attempt's complete/fail/heartbeat races an operator's
cancel, ``fail --force`` or ``requeue --force`` on the same row, both queued on a row lock the
test holds, released once both wait, in the order the machine drew: the first in the lock's
queue wins, the other is fenced out (``LeaseLost``, or the operator's ``conflict``).

Not exercised, since they do not apply to the reference table: ``policy --kind/--queue`` (a
policy per kind or queue needs the kind or queue column mapped, and the reference table maps
neither: jobctl refuses it, exit 2); ``cancel --park`` (no park status is mapped: it is
``failed``). ``pause`` takes nothing back and changes no counter.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from helpers import wait_until
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jobctl import lease

WORKERS = 3
JOBS = 2  # the random interleavings' (the small program has one)
MAX_ATTEMPTS = 2  # small: a worker's fail and reclaim reach "out of attempts" within a run
RECLAIMED = "lease expired before completion"  # reclaim's last_error: a job awaiting review
# the budget: about 3 s on two shared cores (a jobctl command costs ~60 ms in-process). Few
# examples: the small program below holds every action to every point of an attempt and
# races each write against each worker call; what only this part adds is long interleavings
# of several workers on two jobs, which each example draws anew
SETTINGS = settings(
    max_examples=5,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

OPERATOR_ACTIONS = (
    "reclaim",
    "reclaim --refund-attempt",
    "reclaim --park-older-than",
    "reclaim --refund-attempt --park-older-than",
    "reclaim --dry-run --save-plan",
    "reclaim --commit --plan",  # the plan the last dry run saved
    "requeue --force",
    "requeue",
    "fail --force",
    "fail",
    "cancel",
    "policy ID --manual/--auto",
    "quarantine --commit",
)


@dataclasses.dataclass
class Job:
    """What the model says of one job."""

    status: str = "queued"
    live: Held | None = None  # the attempt that holds it: None once taken back or ended
    completed_by: uuid.UUID | None = None  # the attempt whose completion landed
    attempts: int = 0
    policy: str = "auto"
    reclaim_count: int = 0
    expired: bool = False
    old_claim: bool = False  # its claim (reserved_at) an hour old: --park-older-than's
    lease_version: int = 0  # moves with every change of lease_expires_at: a plan's fence
    awaiting_review: bool = False  # failed by reclaim, nobody acted since

    def decision(self, *, park: bool) -> str:
        """reclaim_action: requeue an auto job with attempts left and a claim not too old."""
        ok = self.policy == "auto" and self.attempts < MAX_ATTEMPTS
        return "requeue" if ok and not (park and self.old_claim) else "fail"

    def token(self) -> uuid.UUID | None:
        if self.status == "processing":
            return self.live.claim.attempt_token if self.live else None
        return self.completed_by if self.status == "done" else None

    def end(self, status: str) -> None:
        """The attempt taken back or ended: no live attempt, no lease."""
        self.status, self.live = status, None
        self.expired = self.old_claim = False
        self.lease_version += 1
        self.awaiting_review = False


@dataclasses.dataclass(frozen=True)
class Held:
    """A claim and the worker that made it: live or stale, it is the worker's to try."""

    worker: int
    claim: lease.Claim


@dataclasses.dataclass
class Context:
    dsn: str
    run: Any
    conn: psycopg.Connection[Any]
    locker: psycopg.Connection[Any]  # holds a row lock for the races (not autocommit)
    watcher: psycopg.Connection[Any]  # counts who waits for it
    workers: list[lease.Worker]
    plan: str
    jobs: int = JOBS
    tally: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def lock_waiters(conn: psycopg.Connection[Any]) -> int:
    """Sessions of this database waiting for a lock (the races' barrier)."""
    row = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    return int(row["n"])


class FenceModel(RuleBasedStateMachine):
    ctx: Context  # set by the test before the machine runs
    claims = Bundle("claims")

    def __init__(self) -> None:
        super().__init__()
        c = self.ctx
        # the last example's rows gone (DELETE: a TRUNCATE costs more than a whole example)
        for table in ("jobs", "jobctl.events", "jobctl.attempts"):
            c.conn.execute(f"DELETE FROM {table}")
        c.conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), 1, false)")
        c.conn.execute(
            "INSERT INTO jobs (max_attempts) SELECT %s FROM generate_series(1, %s)",
            (MAX_ATTEMPTS, c.jobs),
        )
        self.jobs = {i: Job() for i in range(1, c.jobs + 1)}
        self.plan: dict[int, tuple[uuid.UUID | None, int, str]] | None = None
        c.tally["examples"] += 1

    # ------------------------------------------------------------ helpers
    def count(self, what: str) -> None:
        self.ctx.tally[what] += 1
        self.ctx.tally["steps"] += 1

    def jobctl(self, *args: str) -> tuple[int, list[dict[str, Any]]]:
        code, out, err = self.ctx.run(*args, "-o", "json")
        try:
            rows = json.loads(out) if out.strip() else []
        except json.JSONDecodeError:
            pytest.fail(f"jobctl {' '.join(args)}: exit {code}, not JSON: {out!r} {err!r}")
        return code, rows

    def claimed(self, held: Held) -> None:
        job = self.jobs[held.claim.id]
        assert job.status == "queued", f"claimed job {held.claim.id}, {job.status} in the model"
        job.status, job.live = "processing", held
        job.attempts += 1
        assert held.claim.attempt == job.attempts
        job.expired = job.old_claim = job.awaiting_review = False
        job.lease_version += 1

    def queued(self) -> list[int]:
        return [i for i, j in self.jobs.items() if j.status == "queued"]

    def is_live(self, held: Held) -> bool:
        return self.jobs[held.claim.id].live == held

    # ------------------------------------------------------------ workers
    @rule(target=claims, w=st.one_of(st.integers(0, WORKERS - 1), st.none()))
    def claim(self, w: int | None) -> Any:
        """Worker ``w`` claims; None: all the workers at the same instant (SKIP LOCKED)."""
        self.count("claim" if w is not None else "claim (all workers at once)")
        queued = self.queued()
        if w is not None:
            got = self.ctx.workers[w].claim()
            held = [] if got is None else [Held(w, got)]
            assert len(held) == min(1, len(queued)), f"claimed {held}, {queued} queued"
        else:
            barrier = threading.Barrier(WORKERS)
            claims: list[lease.Claim | None] = [None] * WORKERS

            def claim(w: int) -> None:
                barrier.wait(timeout=10)
                claims[w] = self.ctx.workers[w].claim()

            threads = [threading.Thread(target=claim, args=(w,)) for w in range(WORKERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # in the jobs' order, not the workers': which worker won which job is the
            # threads' luck, and hypothesis replays a step only if its bundle comes out the same
            held = sorted(
                (Held(w, c) for w, c in enumerate(claims) if c is not None),
                key=lambda h: h.claim.id,
            )
            assert len(held) == min(WORKERS, len(queued)), f"claimed {held}, {queued} queued"
            assert len({h.claim.id for h in held}) == len(held), "two workers claimed one job"
        for h in held:
            self.claimed(h)
        return multiple(*held)

    @rule(held=claims, op=st.sampled_from(["heartbeat", "complete", "complete twice", "fail"]))
    def attempt(self, held: Held, op: str) -> None:
        """One of the worker's attempts, live or stale, heartbeats, completes or fails;
        ``complete twice``: the first call landed, its acknowledgement was lost, the worker
        tries again."""
        job, live = self.jobs[held.claim.id], self.is_live(held)
        landed = job.completed_by == held.claim.attempt_token
        state = "live" if live else "its completion landed" if landed else "stale"
        self.count(f"{op} ({state})")
        worker = self.ctx.workers[held.worker]
        try:
            if op == "heartbeat":
                worker.heartbeat(held.claim)
            elif op == "fail":
                status = worker.fail(held.claim, "boom")
            else:
                worker.complete(held.claim)
        except lease.LeaseLost:
            assert not live, f"the live attempt's {op} raised LeaseLost"
            assert not (landed and op != "heartbeat" and op != "fail"), (
                "a complete retried after its first call landed raised LeaseLost"
            )
            return
        if op == "heartbeat":
            assert live, "a stale attempt's heartbeat went through"
            job.expired = False
            job.lease_version += 1
        elif op == "fail":
            assert live, "a stale attempt's fail went through"
            expected = "queued" if job.attempts < MAX_ATTEMPTS else "failed"
            assert status == expected
            job.end(expected)
        else:
            assert live or landed, (
                f"a stale attempt's complete went through: job {held.claim.id}, attempt "
                f"{held.claim.attempt} ({held.claim.attempt_token}) of worker w{held.worker}"
            )
            if live:
                job.end("done")
                job.completed_by = held.claim.attempt_token
            if op == "complete twice":
                worker.complete(held.claim)  # its first call landed: this one returns

    # ------------------------------------------------------------ time
    def expire(self, job_id: int, old: bool) -> None:
        """Time passes for one lease (and, ``old``, its claim is an hour old)."""
        self.count("time passes (lease expired)")
        self.ctx.conn.execute(
            "UPDATE jobs SET lease_expires_at = now() - interval '1s', reserved_at = CASE "
            "WHEN %s THEN now() - interval '1 hour' ELSE reserved_at END "
            "WHERE id = %s AND status = 'processing'",
            (old, job_id),
        )
        job = self.jobs[job_id]
        if job.status == "processing":
            job.expired, job.old_claim = True, job.old_claim or old
            job.lease_version += 1

    # ------------------------------------------------------------ operators
    @rule(
        action=st.sampled_from(["time passes", *OPERATOR_ACTIONS]),
        job_id=st.integers(1, JOBS),
        data=st.data(),
    )
    def operator(self, action: str, job_id: int, data: st.DataObject) -> None:
        """An operator's action, or time passing for one lease (drawn as often as any one
        action: a rule of its own, hypothesis drew little else)."""
        policy = min_reclaims = None
        if action == "time passes":
            self.expire(job_id, old=data.draw(st.booleans(), label="old claim"))
            return
        if action.startswith("policy"):
            policy = data.draw(st.sampled_from(["manual", "auto"]), label="policy")
        elif action.startswith("quarantine"):
            min_reclaims = data.draw(st.integers(1, 2), label="min_reclaims")
        self.act(action, job_id, policy=policy or "manual", min_reclaims=min_reclaims or 1)

    def act(self, action: str, job_id: int, *, policy: str, min_reclaims: int) -> None:
        """One of OPERATOR_ACTIONS on job ``job_id`` (the plan's commit: apply_plan)."""
        if action == "reclaim --commit --plan":
            if self.plan is None:  # none saved yet: the dry run saves one first
                self.act("reclaim --dry-run --save-plan", job_id, policy=policy, min_reclaims=1)
            self.apply_plan()
            return
        self.count(action)
        if action.startswith("reclaim --dry-run"):
            self.save_plan()
        elif action.startswith("reclaim"):
            self.reclaim(refund="--refund-attempt" in action, park="--park" in action)
        elif action.startswith(("requeue", "fail", "cancel")):
            self.manual(action.split()[0], job_id, force="--force" in action)
        elif action.startswith("policy"):
            self.policy(job_id, policy)
        else:
            assert action == "quarantine --commit"
            self.quarantine(min_reclaims)

    def expected_reclaim(self, *, park: bool) -> dict[int, str]:
        return {
            i: j.decision(park=park)
            for i, j in self.jobs.items()
            if j.status == "processing" and j.expired
        }

    def reclaimed(self, job_id: int, action: str, *, refund: bool) -> None:
        job = self.jobs[job_id]
        job.end("queued" if action == "requeue" else "failed")
        job.reclaim_count += 1
        job.awaiting_review = action == "fail"
        if refund and action == "requeue" and job.attempts > 0:
            job.attempts -= 1

    def reclaim(self, *, refund: bool, park: bool) -> None:
        options = [*(["--refund-attempt"] if refund else [])]
        options += ["--park-older-than", "30m"] if park else []
        expected = self.expected_reclaim(park=park)
        code, rows = self.jobctl("reclaim", "--commit", "--yes", *options)
        assert code == 0
        assert {r["id"]: r["action"] for r in rows} == expected
        assert all(r["applied"] for r in rows), rows
        for job_id, action in expected.items():
            self.reclaimed(job_id, action, refund=refund)

    def save_plan(self) -> None:
        expected = self.expected_reclaim(park=False)
        code, rows = self.jobctl("reclaim", "--dry-run", "--save-plan", self.ctx.plan)
        assert code == 0
        assert {r["id"]: r["action"] for r in rows} == expected
        self.plan = {
            i: (self.jobs[i].token(), self.jobs[i].lease_version, action)
            for i, action in expected.items()
        }

    def apply_plan(self) -> None:
        """The plan saved by the last dry run, applied now: each row only if it is exactly
        as reviewed (same attempt, same lease, still expired, same decision)."""
        assert self.plan is not None
        self.count("reclaim --commit --plan")
        applies = {
            i: self.jobs[i].status == "processing"
            and self.jobs[i].expired
            and (self.jobs[i].token(), self.jobs[i].lease_version) == (token, version)
            and self.jobs[i].decision(park=False) == action
            for i, (token, version, action) in self.plan.items()
        }
        code, rows = self.jobctl("reclaim", "--commit", "--plan", self.ctx.plan, "--yes")
        assert code == 0, rows
        assert {r["id"]: r["applied"] for r in rows} == applies, rows
        for job_id, applied in applies.items():
            if applied:
                self.reclaimed(job_id, self.plan[job_id][2], refund=False)

    def manual(self, action: str, job_id: int, *, force: bool) -> None:
        """requeue, fail or cancel of one job, as safety.md's table says."""
        job = self.jobs[job_id]
        live = job.status == "processing" and not job.expired
        if job.status == "done":
            outcome, status = "refused", None
        elif action == "cancel":
            processing = job.status == "processing"
            outcome, status = ("cancelled", "failed") if processing else ("refused", None)
        elif action == "requeue" and job.status == "queued":
            outcome, status = "refused", None
        elif action == "fail" and job.status == "failed" and not job.awaiting_review:
            outcome, status = "refused", None
        elif live and not force:
            outcome, status = "refused", None
        elif action == "requeue":
            outcome, status = "requeued", "queued"
        else:
            outcome, status = "failed", "failed"
        args = [action, str(job_id), "--reason", "by hand", "--yes"]
        code, rows = self.jobctl(*args, *(["--force"] if force else []))
        assert [r["outcome"] for r in rows] == [outcome], rows
        assert code == (0 if status else 2)
        if status:
            job.end(status)

    def policy(self, job_id: int, policy: str) -> None:
        job = self.jobs[job_id]
        ok = job.status != "done" and job.policy != policy
        code, rows = self.jobctl("policy", str(job_id), f"--{policy}", "--reason", "r", "--yes")
        assert [r["outcome"] for r in rows] == ["policy_changed" if ok else "refused"], rows
        assert code == (0 if ok else 2)
        if ok:
            job.policy = policy

    def quarantine(self, min_reclaims: int) -> None:
        expected = sorted(
            i
            for i, j in self.jobs.items()
            if j.policy == "auto" and j.reclaim_count >= min_reclaims and j.status != "done"
        )
        code, rows = self.jobctl(
            "quarantine",
            "--min-reclaims",
            str(min_reclaims),
            "--commit",
            "--yes",
            "--reason",
            "crash loop",
        )
        assert code == 0
        assert sorted(r["id"] for r in rows) == expected
        assert all(r["outcome"] == "quarantined" for r in rows), rows
        for i in expected:
            self.jobs[i].policy = "manual"

    # ------------------------------------------------------------ races
    @precondition(lambda self: any(j.live for j in self.jobs.values()))
    @rule(
        data=st.data(),
        op=st.sampled_from(["complete", "fail", "heartbeat"]),
        operator=st.sampled_from(["cancel", "fail", "requeue"]),
        worker_first=st.booleans(),
    )
    def race(self, data: st.DataObject, op: str, operator: str, worker_first: bool) -> None:
        job_id = data.draw(st.sampled_from(sorted(i for i, j in self.jobs.items() if j.live)))
        self.race_on(job_id, op, operator, worker_first=worker_first)

    def race_on(self, job_id: int, op: str, operator: str, *, worker_first: bool) -> None:
        """The live attempt's ``op`` and an operator's write on the same row, both queued on
        a lock the test holds, in this order: the first wins, the second is fenced out."""
        job = self.jobs[job_id]
        held = job.live
        assert held is not None
        # the operator reads the row before the worker's write lands: a live lease makes
        # fail --force jobctl cancel's write, which reads a row that moved again and, the same
        # attempt still running, takes it; on an expired lease it is a plain fail, fenced
        cancels = operator == "cancel" or (operator == "fail" and not job.expired)
        first = "worker" if worker_first else "operator"
        self.count(
            f"race: {op} against {operator}{' --force' * (operator != 'cancel')}, {first} first"
        )
        c, worker = self.ctx, self.ctx.workers[held.worker]
        done: dict[str, Any] = {}

        def worker_side() -> None:
            try:
                call = getattr(worker, op)
                done["worker"] = call(held.claim, "boom") if op == "fail" else call(held.claim)
            except BaseException as exc:  # judged below, in the main thread
                done["worker"] = exc

        watcher = c.watcher
        worker_thread = threading.Thread(target=worker_side)

        def release() -> None:
            try:
                if not worker_first:
                    wait_until(lambda: lock_waiters(watcher) >= 1, what="the operator waits")
                    worker_thread.start()
                wait_until(lambda: lock_waiters(watcher) >= 2, what="both wait")
            except BaseException as exc:
                done["release"] = exc
            finally:
                c.locker.commit()

        c.locker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        releaser = threading.Thread(target=release)
        try:
            if worker_first:
                worker_thread.start()
                wait_until(lambda: lock_waiters(watcher) >= 1, what="the worker waits")
            releaser.start()
            args = [operator, str(job_id), "--reason", "raced", "--yes"]
            code, rows = self.jobctl(
                "--lock-timeout", "20s", *args, *(["--force"] if operator != "cancel" else [])
            )
        finally:
            releaser.join()
            if worker_thread.ident:
                worker_thread.join()
        assert "release" not in done, done["release"]
        result = done["worker"]
        taken = {"cancel": "failed", "fail": "failed", "requeue": "queued"}[operator]
        outcome = {"cancel": "cancelled", "fail": "failed", "requeue": "requeued"}[operator]
        if worker_first:
            assert not isinstance(result, BaseException), f"the live attempt's {op}: {result!r}"
            if op == "heartbeat":
                job.expired, job.lease_version = False, job.lease_version + 1
            elif op == "complete":
                job.end("done")
                job.completed_by = held.claim.attempt_token
            else:
                assert result == ("queued" if job.attempts < MAX_ATTEMPTS else "failed")
                job.end(result)
            if op == "heartbeat" and cancels:
                # the same attempt still runs: cancel reads it again and takes it
                assert [r["outcome"] for r in rows] == [outcome] and code == 0, rows
                job.end(taken)
            else:
                assert [r["outcome"] for r in rows] == ["conflict"] and code == 3, rows
        else:
            assert [r["outcome"] for r in rows] == [outcome] and code == 0, rows
            job.end(taken)
            assert isinstance(result, lease.LeaseLost), f"the fenced-out {op}: {result!r}"

    # ------------------------------------------------------------ invariants
    @invariant()
    def rows_agree_with_the_model(self) -> None:
        rows = self.ctx.conn.execute(
            "SELECT id, status, attempt_token, attempts, recovery_policy, reclaim_count, "
            "lease_expires_at < now() AS expired FROM jobs ORDER BY id"
        ).fetchall()
        assert [r["id"] for r in rows] == list(self.jobs)
        for r in rows:
            job = self.jobs[r["id"]]
            seen = (
                r["status"],
                r["attempt_token"],
                r["attempts"],
                r["recovery_policy"],
                r["reclaim_count"],
            )
            model = (job.status, job.token(), job.attempts, job.policy, job.reclaim_count)
            assert seen == model, f"job {r['id']}: row {seen}, model {model}"
            if job.status == "processing":
                assert r["expired"] == job.expired, f"job {r['id']}: lease expired {r['expired']}"


@pytest.fixture
def context(dsn, conn, run, tmp_path) -> Iterator[Context]:
    """The model's world: a worker per connection, the test's own connections beside them."""
    with contextlib.ExitStack() as stack:
        workers = [
            lease.Worker(stack.enter_context(psycopg.connect(dsn, autocommit=True)), f"w{i}")
            for i in range(WORKERS)
        ]
        locker = stack.enter_context(psycopg.connect(dsn))
        watcher = stack.enter_context(
            psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row)
        )
        FenceModel.ctx = Context(
            dsn, run, conn, locker, watcher, workers, str(tmp_path / "plan.json")
        )
        yield FenceModel.ctx


def report(capsys: pytest.CaptureFixture[str], ctx: Context, title: str) -> list[str]:
    """The numbers, visible under -s: workers, operator actions, steps, interleavings."""
    tally = ctx.tally
    exercised = [a for a in OPERATOR_ACTIONS if tally[a]]
    races = sum(n for k, n in tally.items() if k.startswith("race"))
    with capsys.disabled():
        print(
            f"\n{title}: {WORKERS} workers on {ctx.jobs} job(s); {len(exercised)} of "
            f"{len(OPERATOR_ACTIONS)} operator actions exercised; {tally['steps']} steps in "
            f"{tally['examples']} interleavings; {races} of them forced races on a row lock"
        )
        for what, n in sorted(tally.items()):
            if what not in ("steps", "examples"):
                print(f"  {n:5d}  {what}")
    return exercised


def test_random_interleavings(context, capsys):
    """Long interleavings of everything, drawn and shrunk by hypothesis (which actions a run
    draws is its luck: the test below holds each to every point)."""
    run_state_machine_as_test(FenceModel, settings=SETTINGS)
    report(capsys, context, "fence model, random interleavings")


# A small program, every way: worker A claims job 1 and goes to a point of its attempt (just
# claimed, heartbeat, completed with a lost acknowledgement), its lease expired or not (and
# its claim an hour old: --park-older-than's), then the operator's actions; then worker B
# claims what it can and completes it (twice: a lost acknowledgement); then A, live or stale,
# tries everything. "time passes" between a plan's dry run and its commit moves the lease.
POINTS = ("claimed", "heartbeat", "completed")
PROGRAMS: tuple[tuple[str, ...], ...] = (
    *((a,) for a in OPERATOR_ACTIONS if "--plan" not in a),
    ("reclaim --dry-run --save-plan", "reclaim --commit --plan"),
    ("reclaim --dry-run --save-plan", "time passes", "reclaim --commit --plan"),
    ("policy ID --manual/--auto", "reclaim"),
    ("reclaim", "quarantine --commit"),
)


def test_every_operator_action_at_every_point(context, capsys):
    """The small program above, for every operator action (and the pairs that need another
    first) at every point of A's attempt, lease expired or live; then every race of A's live
    attempt against an operator's write, in both orders."""
    context.jobs = 1
    for actions, point, expired in itertools.product(PROGRAMS, POINTS, (False, True)):
        if point == "completed" and expired:
            continue  # a done job holds no lease
        with program(f"{actions} at A's point {point!r}, lease expired: {expired}"):
            m = FenceModel()
            (a,) = m.claim(0).values
            m.rows_agree_with_the_model()
            if point != "claimed":
                m.attempt(a, "heartbeat")
            if point == "completed":
                m.attempt(a, "complete twice")
            if expired:
                m.expire(1, old=True)
            for action in actions:
                if action == "time passes":
                    m.expire(1, old=True)
                else:
                    m.act(action, 1, policy="manual", min_reclaims=1)
                m.rows_agree_with_the_model()
            epilogue(m, a)
    for op, operator, worker_first, expired in itertools.product(
        ("complete", "fail", "heartbeat"),
        ("cancel", "fail", "requeue"),
        (True, False),
        (False, True),
    ):
        first = "A" if worker_first else "the operator"
        with program(f"A's {op} against {operator}, {first} first, lease expired: {expired}"):
            m = FenceModel()
            (a,) = m.claim(0).values
            if expired:
                m.expire(1, old=False)
            m.race_on(1, op, operator, worker_first=worker_first)
            m.rows_agree_with_the_model()
            epilogue(m, a)
    exercised = report(capsys, context, "fence model, every operator action at every point")
    assert exercised == list(OPERATOR_ACTIONS)


@contextlib.contextmanager
def program(what: str) -> Iterator[None]:
    """A failure names the program it happened in."""
    try:
        yield
    except AssertionError as exc:
        exc.add_note(f"in the program: {what}, then B claims and completes, then A retries")
        raise


def epilogue(m: FenceModel, a: Held) -> None:
    """B claims what it can and completes it, then A tries everything."""
    for b in m.claim(1).values:
        m.attempt(b, "heartbeat")
        m.rows_agree_with_the_model()
        m.attempt(b, "complete twice")
        m.rows_agree_with_the_model()
    for op in ("heartbeat", "complete", "complete twice", "fail"):
        m.attempt(a, op)
        m.rows_agree_with_the_model()
