"""``jobctl top``'s workflows: one refresh of the console (the same reads as ``stuck
--expiring-within`` and ``review``, each bounded, and the counts that say how many more there
are), a job's story for its detail, and the operator's writes on the rows as the screen read
them (``manual``'s fenced write, audited with the actor and reason). Example::

    snap = console.refresh(s, standing, console.Ask(dt.timedelta(seconds=30), limit=500))
    report = console.act(s, "requeue", [row for row in snap.stuck if row["id"] in marked],
                         reason="checked")
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobctl import durations, errors
from jobctl.ops import manual, pause, repeated_ids, review, slices, standby, triage
from jobctl.ops import stuck as stuck_read

if TYPE_CHECKING:
    from jobctl.contract.shapes import Row
    from jobctl.db.session import Session
    from jobctl.ops.standby import Standing

# what a stuck row (no row version in stuck's read) must still be, as manual_read reads it,
# for a write to go ahead: the attempt, its worker and its lease (a heartbeat moves it)
SEEN_FIELDS = (
    "status",
    "attempt_token",
    "reserved_by",
    "attempts",
    "reclaim_count",
    "recovery_policy",
    "lease_expires_at",
)


@dataclasses.dataclass(frozen=True)
class Ask:
    """What the console reads: the window of 'expiring soon', how many rows, and the view
    on screen: its rows are read (stuck's, review's, or summary's whole), the others' only
    counted."""

    expiring_within: dt.timedelta | None  # None: the last third of each lease
    limit: int
    view: str = "stuck"  # stuck, review or summary


@dataclasses.dataclass
class Snapshot:
    """One refresh: the rows of each view (at most ``limit`` each) and the counts."""

    stuck: list[Row]  # expired, expiring soon, then no lease (at_risk's order)
    review: list[Row]  # awaiting review, longest waiting first
    expired: int  # every expired lease (the rows beyond ``limit`` counted, not read)
    expiring: int
    awaiting_review: int
    ready: int
    oldest_ready_s: float | None
    read_at: dt.datetime
    no_lease: int = 0  # processing with no lease (claimed by code that sets none): shown last
    summaries: list[tuple[str | None, Row]] = dataclasses.field(default_factory=list)
    # triage.summary's when asked: (None, it), or each target's (name, it) across several
    standing: Standing | None = None  # the server, a standby's lag as of this refresh
    # the table's pauses (ops.pause.waiting: age, the queued jobs each holds back), oldest
    # first; across targets each tagged with its target
    pauses: list[Row] = dataclasses.field(default_factory=list)
    # each id two rows hold that the refresh left out (every other job shown), in one line
    # for the status line; across targets each line with its target
    repeated: list[str] = dataclasses.field(default_factory=list)

    @property
    def more_stuck(self) -> int:
        return max(0, self.expired + self.expiring + self.no_lease - len(self.stuck))

    @property
    def more_review(self) -> int:
        return max(0, self.awaiting_review - len(self.review))


# a lost connection is retried as the reclaimer retries it (``ops.reclaim.service``): at once
# after half a second, then each wait twice the last, never more than this
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 30.0


@dataclasses.dataclass
class Lost:
    """A database the console lost (a restart, a failover, a pooler bounce): since when
    (``time.monotonic``), why, how many reconnections failed since, and when the next one is
    due. Pure: the clock is the caller's."""

    since: float
    why: str
    tries: int = 0
    due: float = 0.0
    wait_s: float = FIRST_RETRY_S

    @classmethod
    def at(cls, now: float, why: str) -> Lost:
        """The loss seen at ``now``: its first reconnection due in ``FIRST_RETRY_S``."""
        return cls(since=now, why=why, due=now + FIRST_RETRY_S)

    def failed(self, now: float, why: str) -> None:
        """A reconnection failed at ``now``: the next one waits twice as long (capped)."""
        self.tries += 1
        self.why = why
        self.wait_s = min(self.wait_s * 2, MAX_RETRY_S)
        self.due = now + self.wait_s

    def is_due(self, now: float) -> bool:
        return now >= self.due

    def line(self, now: float) -> str:
        """Where the reconnection is, in a few words: ``lost 12s, try 3 in 4s``."""
        left = durations.human(max(0.0, self.due - now))
        return f"lost {durations.human(now - self.since)}, try {self.tries + 1} in {left}"


def refresh(s: Session, standing: Standing | None, ask: Ask) -> Snapshot:
    """The console's data, in one read-only transaction: the view's rows (at_risk's or
    review's, bounded by ``ask.limit``; or ``summary``'s whole) and the counts of
    ``summary`` (processing by lease state, awaiting review, the queue's ready jobs), each
    one round trip."""
    left = repeated_ids.LeftOut()  # ids two rows hold: left out, named on the status line
    which = stuck_read.Ask(
        triage.ExpiredFilter(left_out=left), ask.limit, ask.expiring_within, by_lease=True
    )
    if standing is not None and standing.standby:  # its lag now: the strip, the widening
        with s.transaction(read_only=True):
            standing = standby.probe(s.conn)
    with s.transaction(read_only=True):
        found, waiting = [], []
        if ask.view == "stuck":
            found = [dict(r) for r in stuck_read.rows(s, standing, which)]
        if ask.view == "review":
            waiting = [dict(r) for r in review.awaiting(s, review.ReviewFilter(), ask.limit, left)]
        every = slices.EVERY.params()  # (the counts of every job: no slice)
        processing = s.one("summary_processing", {"soon": ask.expiring_within, **every})
        awaiting = s.one("review_count", every)["awaiting_review"]
        ready = s.one("queue_ready", every)
        whole = triage.summary(s, ask.expiring_within) if ask.view == "summary" else None
        paused = [dict(p) for p in pause.waiting(s)]
        repeated = left.lines(s)
    return Snapshot(
        stuck=found,
        review=waiting,
        expired=int(processing.get("expired") or 0),
        expiring=int(processing.get("expiring_soon") or 0),
        no_lease=int(processing.get("no_lease") or 0),
        awaiting_review=int(awaiting or 0),
        ready=int(ready.get("ready") or 0),
        oldest_ready_s=ready.get("oldest_ready_s"),
        read_at=dt.datetime.now(dt.timezone.utc),  # the client's clock: no round trip
        summaries=[] if whole is None else [(None, whole)],
        standing=standing,
        pauses=paused,
        repeated=repeated,
    )


def merged(snaps: Sequence[tuple[str, Snapshot]]) -> Snapshot:
    """The snapshots of several targets as one: each row tagged with its target (first),
    the stuck rows by lease expiry, the review rows longest waiting first, counts added."""
    far = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    stuck = [{"target": n, **r} for n, snap in snaps for r in snap.stuck]
    stuck.sort(key=lambda r: r.get("lease_expires_at") or far)
    waiting = [{"target": n, **r} for n, snap in snaps for r in snap.review]
    waiting.sort(key=lambda r: -(r.get("waited_s") or 0.0))
    oldest = [snap.oldest_ready_s for _, snap in snaps if snap.oldest_ready_s is not None]
    return Snapshot(
        stuck=stuck,
        review=waiting,
        expired=sum(snap.expired for _, snap in snaps),
        expiring=sum(snap.expiring for _, snap in snaps),
        no_lease=sum(snap.no_lease for _, snap in snaps),
        awaiting_review=sum(snap.awaiting_review for _, snap in snaps),
        ready=sum(snap.ready for _, snap in snaps),
        oldest_ready_s=max(oldest) if oldest else None,
        read_at=min(snap.read_at for _, snap in snaps),
        summaries=[(n, whole) for n, snap in snaps for _, whole in snap.summaries],
        pauses=[{"target": n, **p} for n, snap in snaps for p in snap.pauses],
        repeated=[f"{n}: {line}" for n, snap in snaps for line in snap.repeated],
    )


def detail(s: Session, job_id: Any) -> tuple[Row, list[str]]:
    """A job's history (attempts with their tokens whole, events) and ``explain``'s
    sentences, read in one read-only transaction."""
    from jobctl.render import story

    with s.transaction(read_only=True):
        found = triage.history(s, job_id)
    mapping = s.table.mapping
    told = story.explain(
        found,
        parked=mapping.parked,
        failed=mapping.status("failed"),
        unlimited=mapping.unlimited_max_attempts,
    )
    return dict(found), list(told["story"])


def since_seen(seen: Row, now: Row | None) -> str | None:
    """What became of a job since the screen read it as ``seen`` (a row of ``stuck``'s read),
    or None when ``now`` (``manual_read``'s row) is still that job: the same status, attempt
    token, worker, counts, policy and lease expiry."""
    if now is None:
        return "job no longer exists; nothing written"
    if now["status"] != seen.get("status"):
        return f"now {now['status']} (changed since the screen read it); nothing written"
    changed = [f for f in SEEN_FIELDS if _same(now.get(f)) != _same(seen.get(f))]
    if changed:
        return f"{', '.join(changed)} changed since the screen read it; nothing written"
    return None


def _same(value: Any) -> float | str | None:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return None if value is None else str(value)


def decisions(s: Session, action: manual.Action, seen: Sequence[Row]) -> list[manual.Decision]:
    """Each row decided by the rules of a direct ``requeue``/``fail`` (``manual.decide``,
    no --force), and only if the job is still the row the screen read (else a conflict):
    a review row by its fence (status, token, row version: ``review.planned_decisions``), a
    stuck row by ``since_seen``."""
    found: list[manual.Decision] = []
    for row in seen:
        if "row_version" in row:
            found += review.planned_decisions(s, action, [row], force=False)
            continue
        (typed,) = s.job_ids([row["id"]])
        decision = manual.decide(s, typed, action, force=False, expect_token=None)
        changed = since_seen(row, decision.seen)
        if changed is not None and decision.outcome != "not_found":
            decision.outcome, decision.detail = "conflict", changed
        found.append(decision)
    return found


def act(
    s: Session, action: manual.Action, seen: Sequence[Row], *, reason: str | None
) -> manual.Report:
    """Requeue or fail the rows the screen read (already confirmed on the screen): each
    decided (``decisions``), then written with ``manual``'s fenced UPDATE on the row as
    read, audited with the session's actor and ``reason``; a row changed since is a
    ``conflict`` and nothing is written for it."""
    if action == "fail" and not (reason or "").strip():
        raise errors.UsageError("fail needs a reason: it becomes the job's last_error")
    decided = decisions(s, action, seen)
    write = manual.act(
        s,
        action,
        decided,
        lambda d: manual.apply(s, d, action, reason=reason, delay=dt.timedelta(0)),
        ask=False,
    )
    return manual.answered(write)


def save_plan(s: Session, path: Path, seen: Sequence[Row]) -> tuple[int, list[str]]:
    """The rows as a review plan at ``path`` (``review --save-plan``'s format, applied by
    ``requeue/fail --plan``): review rows as read; a stuck row with its fence as read now,
    when it is still the row the screen read (else left out, said in the lines returned)."""
    rows: list[Row] = []
    left: list[str] = []
    with s.transaction(read_only=True):
        location = s.origin()
        for row in seen:
            if "row_version" in row:
                rows.append(row)
                continue
            (typed,) = s.job_ids([row["id"]])
            now = s.row("manual_read", manual.read_params(typed))
            changed = since_seen(row, now)
            if changed is None and now is not None:
                rows.append({k: now[k] for k in manual.FENCE} | _plan_extras(now))
            else:
                left.append(f"job {row['id']}: {changed}")
    review.save_plan(path, location, rows)  # type: ignore[arg-type]
    return len(rows), left


def _plan_extras(now: Row) -> Row:
    return {k: now[k] for k in ("reserved_by", "attempts", "max_attempts", "recovery_policy")}
