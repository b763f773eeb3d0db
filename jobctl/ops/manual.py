"""Operator writes — requeue, fail, cancel, policy, quarantine: read each job, decide, ask
(``act`` yields the question: ``Asked``), then one UPDATE fenced on exactly what was read;
one outcome per job and the worst exit code. requeue, fail and cancel's request and their
one path are ``by_hand``'s.
Cancel (and ``fail --force`` on a live lease: one write, ``manual_cancel``) takes a running
attempt back; the worker learns it at its next heartbeat (``lease.LeaseLost``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable, Generator, Sequence
from typing import Any, Literal, TypeVar, cast

import psycopg

from jobctl import db, durations, errors
from jobctl.contract import safe_text
from jobctl.contract.shapes import ManualResult, Row
from jobctl.db.session import Session
from jobctl.ops import lost_server, repeated_ids, triage
from jobctl.ops.outcomes import OUTCOME_EXIT
from jobctl.table.mapping import TableMapping

Action = Literal["requeue", "fail", "cancel"]
T = TypeVar("T")

DONE_OUTCOME = {"requeue": "requeued", "fail": "failed", "cancel": "cancelled"}
DESIGN_NAMES = TableMapping()  # a table that uses the lease design's own names
FENCE = ("id", "status", "attempt_token", "updated_at", "row_version")  # the row as read
HEARTBEAT_RETRIES = 5  # a cancel fenced again on the same attempt after its heartbeats


@dataclasses.dataclass
class Decision:
    """One id: what was read (the fence), and whether the action may proceed."""

    id: Any  # in the id column's type: int, UUID, str
    seen: Row | None
    outcome: str | None = None  # set when decided without writing: refused, conflict, ...
    detail: str = ""

    @property
    def live(self) -> bool:
        """The lease as read is live: its worker may be running the job."""
        return self.seen is not None and self.seen["lease_state"] == "live"

    def result(self) -> ManualResult:
        seen = self.seen or {}
        return {
            "id": self.id,
            "outcome": self.outcome,
            "detail": self.detail,
            "status_before": seen.get("status"),
            "attempt_token": seen.get("attempt_token"),
            "reserved_by": seen.get("reserved_by"),
            "lease_state": seen.get("lease_state"),
            "reclaim_count": seen.get("reclaim_count"),
            "recovery_policy_before": seen.get("recovery_policy"),
        }


@dataclasses.dataclass
class Report:
    """What an operator write did: one result per job, and the exit code (the worst)."""

    results: list[ManualResult]

    @property
    def exit_code(self) -> int:
        return errors.worst_exit_code([OUTCOME_EXIT[str(r["outcome"])] for r in self.results])

    def apart(self) -> list[ManualResult]:
        """The results to say apart on stderr, where a redirected stdout would hide them:
        locked, not found, an id two rows hold (``render.write_lines.apart`` words them)."""
        return [
            r
            for r in self.results
            if r["outcome"] in ("locked", "not_found")
            or (r["outcome"] == "refused" and repeated_ids.WHY in r["detail"])
        ]


# ---------------------------------------------------------------- the workflows
def paced(delay: dt.timedelta, spread: dt.timedelta, n: int) -> list[dt.timedelta]:
    """The delays of ``n`` requeued jobs returned over ``spread`` (--spread): the k-th of n
    after ``delay + spread * (k + jitter) / n``, jitter uniform in [0, 1): evenly over
    [delay, delay + spread], no two jobs at the same instant. No spread: ``delay`` each."""
    import random

    if not spread:
        return [delay] * n
    return [delay + spread * ((k + random.random()) / n) for k in range(n)]


def paced_writer(
    s: Session,
    decisions: Sequence[Decision],
    *,
    reason: str | None,
    delay: dt.timedelta,
    spread: dt.timedelta,
) -> Callable[[Decision], Decision]:
    """``act``'s write of a requeue whose eligible jobs (in order) return paced over
    ``spread``, each in its own fenced statement (``manual_requeue``'s delay)."""
    eligible = [d for d in decisions if d.outcome is None and d.seen is not None]
    delays = dict(zip((id(d) for d in eligible), paced(delay, spread, len(eligible)), strict=True))
    return lambda d: apply(s, d, "requeue", reason=reason, delay=delays.get(id(d), delay))


def set_policies(
    s: Session,
    job_ids: Sequence[str | int],
    policy: str,
    *,
    reason: str | None,
    ask: bool,
) -> Generator[Asked, None, Report]:
    """Set jobs' recovery policy, each fenced and audited as ``policy_changed``."""
    decisions = [decide_policy(s, i, policy) for i in s.job_ids(job_ids)]
    return (
        yield from act(
            s,
            f"set policy {policy} on",
            decisions,
            lambda d: set_policy(s, d, policy, event="policy_changed", reason=reason),
            ask=ask,
        )
    )


def quarantine(
    s: Session, min_reclaims: int, limit: int, *, reason: str | None, ask: bool
) -> Generator[Asked, None, Report]:
    """Switch auto jobs reclaimed ``min_reclaims`` times or more to manual, fenced."""
    return (
        yield from act(
            s,
            "quarantine",
            quarantine_candidates(s, min_reclaims, limit),
            lambda d: set_policy(
                s,
                d,
                "manual",
                event="quarantined",
                reason=reason or f"reclaimed {d.seen['reclaim_count'] if d.seen else '?'} times",
            ),
            ask=ask,
        )
    )


@dataclasses.dataclass(frozen=True)
class Asked:
    """The question before an operator write: what it does (``verb``) to the eligible jobs
    (``rows``, as read). The write goes on once the generator is resumed; closed instead,
    nothing is written."""

    verb: str
    rows: list[Row]


def act(
    s: Session,
    verb: str,
    decisions: list[Decision],
    write: Callable[[Decision], Decision],
    *,
    ask: bool,
) -> Generator[Asked, None, Report]:
    """Every operator write: the eligible jobs asked about (``ask``; False: confirmed
    already), then each written fenced. Each job is decided and reported on its own."""
    eligible = [d.seen for d in decisions if d.outcome is None and d.seen]
    if eligible and ask:
        yield Asked(verb, eligible)
    results: list[ManualResult] = []
    progress = lost_server.Progress(
        f"of {len(eligible)} job(s) written ({verb}) and committed",
        "re-running the same command is safe: the jobs already done are refused or conflict "
        "(their row changed), the rest are done",
        "the write",
    )
    try:
        with db.mapped_errors():
            for d in decisions:
                results.append(write(d).result())
                progress.done += OUTCOME_EXIT[str(d.outcome)] == errors.EXIT_OK
    except errors.ConnectError as exc:
        raise progress.lost(exc) from None
    return Report(results)


def answered(steps: Generator[Asked, None, T]) -> T:
    """What a write that asks nothing did (confirmed already: --yes, a screen's own
    question); a question it yields after all is a bug."""
    try:
        step = next(steps)
    except StopIteration as done:
        return cast(T, done.value)
    steps.close()
    raise AssertionError(f"a confirmed write asked again: {step.verb}")


# ---------------------------------------------------------------- read and decide
def read_params(job_id: Any) -> dict[str, Any]:
    """``manual_read``'s parameters: the id, and its texts (worker, last_error) cut on the
    server as stuck shows them (the fence is never a text; a 30 MB worker name stays there)."""
    return {"id": job_id, "cut": triage.DISPLAY_CHARS}


def _read(s: Session, job_id: Any) -> Decision:
    """The job as an operator action sees it (its fence), in a read-only transaction."""
    with s.transaction(read_only=True):
        seen = s.row("manual_read", read_params(job_id))
        repeated = seen is not None and seen.pop(repeated_ids.FLAG)
        said = repeated_ids.refusal(s, job_id) if repeated else ""
    if repeated:  # two jobs, one id: neither is written, the id is refused
        return Decision(job_id, None, "refused", said)
    decision = Decision(job_id, seen)
    if seen is None:
        decision.outcome, decision.detail = "not_found", f"job {job_id} not found"
    return decision


def decide(
    s: Session,
    job_id: Any,
    action: Action,
    *,
    force: bool,
    expect_token: uuid.UUID | None,
    reviewed: Row | None = None,
) -> Decision:
    """Read the job (read-only) and apply the eligibility rules (``refusal``): the one path
    of an id given and of a saved review plan's row (``reviewed``: that row, as the plan
    has it), which must still be the very row version reviewed (``since_review``), else a
    conflict. The write is then fenced on the job as read here."""
    decision = _read(s, job_id)
    if reviewed is not None:
        changed = since_review(reviewed, decision.seen, attempt_only=action == "cancel")
        if changed is not None:
            decision.outcome, decision.detail = "conflict", changed
            return decision
    if decision.seen is not None:
        decision.outcome, decision.detail = refusal(
            decision.seen,
            action,
            force=force,
            expect_token=expect_token,
            mapping=s.table.mapping,
        )
    return decision


def refusal(
    seen: Row,
    action: Action,
    *,
    force: bool,
    expect_token: uuid.UUID | None,
    mapping: TableMapping = DESIGN_NAMES,
) -> tuple[str | None, str]:
    """Why ``action`` may not go ahead on the job as read: (outcome, detail), or (None, "").

    The eligibility table of the docs (manual actions), as code: a done job is refused, so is
    a requeue of a queued job and a fail of a failed one, and a live lease unless ``force``,
    as is a processing job with no lease claimed recently (``lease_less_recent``);
    a cancel takes only a running (processing) job, whatever its lease; an ``expect_token``
    that is not the job's token is a conflict. ``seen["status"]`` is the
    table's own value; ``mapping`` says which part it plays (a parked job is taken like a
    failed one, and failing it moves it to failed).
    """
    if expect_token is not None and seen["attempt_token"] != expect_token:
        return "conflict", f"attempt token is {seen['attempt_token']}, not {expect_token}"
    role = mapping.role(seen["status"])
    if role is None:
        return "refused", (
            f"status {seen['status']!r} is the application's own, not one of the lease "
            "design's: jobctl leaves the job alone"
        )
    status = seen["status"]  # named as the table has it: "already pending", not "queued"
    if role == "done":
        return "refused", "job is done" if status == "done" else f"job is done ({status})"
    if action == "cancel":
        if role != "processing":
            return "refused", f"job is {status}, not running: no attempt to cancel"
        return None, ""
    if action == "requeue" and role == "queued":
        return "refused", f"job is already {status}"
    if action == "fail" and role in ("failed", "cancelled") and not seen.get("awaiting_review"):
        # (a job reclaim failed that awaits review may be failed for good, with a reason)
        return "refused", f"job is already {status}"
    if seen["lease_state"] == "live" and not force:
        until = seen["lease_expires_at"].isoformat(sep=" ", timespec="seconds")
        return "refused", (
            f"lease is live until {until}: "
            f"worker {seen['reserved_by']} may be running it (--force overrides)"
        )
    if seen.get("lease_less_recent") and not force:
        return "refused", lease_less_refusal(seen)
    return None, ""


def lease_less_refusal(seen: Row) -> str:
    """Why a processing job with no lease claimed recently (``lease_less_recent``: within
    the hour, or at a time jobctl cannot read) is taken like a live lease."""
    age = seen.get("claimed_age_s")
    by = seen.get("reserved_by")
    if age is None:
        claimed = "no claim time jobctl can read"
    elif age < 0:
        claimed = "claimed at a time ahead of the server's clock"
    else:
        claimed = f"claimed {durations.human(age)} ago"
    return (
        f"no lease, {claimed}"
        + (f" by {by}" if by is not None else "")
        + ": its worker may still be running it (--force overrides)"
    )


def since_review(reviewed: Row, now: Row | None, *, attempt_only: bool = False) -> str | None:
    """What became of a job since a review plan's row ``reviewed`` was saved (the ``detail``
    of its conflict), or None when ``now`` (the job as read: ``manual_read``) is that very
    row: the same row version (``xmin``: a committed row version is never made again),
    status and attempt token (``attempt_only``, a cancel's plan: the same attempt, whatever
    its heartbeats moved since). Nothing is taken on the plan's word but which row it names."""
    if now is None:
        return "job no longer exists; nothing written"
    same = (
        (attempt_only or _text(now["row_version"]) == _text(reviewed.get("row_version")))
        and now["status"] == reviewed.get("status")
        and _text(now["attempt_token"]) == _text(reviewed.get("attempt_token"))
    )
    if same:
        return None
    if now["status"] != reviewed.get("status"):
        return f"now {now['status']} (changed since the review); nothing written"
    if _text(now["attempt_token"]) != _text(reviewed.get("attempt_token")):
        return "another attempt holds it now (changed since the review); nothing written"
    if not now["awaiting_review"]:
        return "no longer awaiting review (changed since it was reviewed); nothing written"
    return "the row changed since the review; nothing written"


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def decide_policy(s: Session, job_id: Any, policy: str) -> Decision:
    """Read the job for a policy switch: refused when it is done or already has ``policy``."""
    decision = _read(s, job_id)
    if decision.seen is not None:
        decision.outcome, decision.detail = policy_refusal(
            decision.seen, policy, mapping=s.table.mapping
        )
    return decision


def policy_refusal(
    seen: Row, policy: str, *, mapping: TableMapping = DESIGN_NAMES
) -> tuple[str | None, str]:
    """Why a switch to ``policy`` may not go ahead: (outcome, detail), or (None, "")."""
    if mapping.role(seen["status"]) == "done":
        status = seen["status"]
        return "refused", "job is done" if status == "done" else f"job is done ({status})"
    if seen["recovery_policy"] == policy:
        return "refused", f"policy is already {policy}"
    return None, ""


def quarantine_candidates(s: Session, min_reclaims: int, limit: int | None) -> list[Decision]:
    """Auto jobs reclaimed ``min_reclaims`` times or more (not done), read for the fence."""
    with s.transaction(read_only=True):
        params = {"min_reclaims": min_reclaims, "limit": limit, "cut": triage.DISPLAY_CHARS}
        rows = s.rows("quarantine_candidates", params)
    return [Decision(row["id"], row) for row in rows]


# ---------------------------------------------------------------- fenced writes
def apply(
    s: Session,
    decision: Decision,
    action: Action,
    *,
    reason: str | None,
    delay: dt.timedelta,
    park: bool = False,
) -> Decision:
    """Requeue, fail or cancel one decided job, one fenced UPDATE (``_fenced_write``)."""
    if decision.outcome is None and decision.seen is not None:
        mapping = s.table.mapping
        cancels = action == "cancel" or (action == "fail" and decision.live)  # fail --force
        name = (
            "manual_cancel" if cancels else {"requeue": "manual_requeue"}.get(action, "manual_fail")
        )
        became = mapping.status("queued" if action == "requeue" else "failed")
        became = mapping.cancels_to if action == "cancel" else became
        became = mapping.parked if cancels and park else became
        done = f"{decision.seen['status']} -> {became}"
        done += " (attempt cancelled)" if cancels and action == "fail" else ""
        for _ in range(HEARTBEAT_RETRIES if cancels else 1):
            _fenced_write(
                s,
                decision,
                name,
                {"reason": reason, "delay": delay, "park": park, "cancelled": action == "cancel"},
                action="cancel" if cancels else action,
                reason=reason,
                done=(DONE_OUTCOME[action], done),
                becomes=became,
            )
            if not cancels or decision.outcome != "conflict" or not _same_attempt(s, decision):
                break
    return decision


def _same_attempt(s: Session, decision: Decision) -> bool:
    """After a cancel's conflict: whether the attempt as read still runs, only moved on (its
    worker's heartbeats change the row's version); if so, read it again to fence on that."""
    assert decision.seen is not None
    again = _read(s, decision.id).seen
    if again is None or any(again[k] != decision.seen[k] for k in ("status", "attempt_token")):
        now = f"now {again['status']}" if again else "gone"
        decision.detail = f"the attempt ended since it was read ({now}); nothing written"
        return False
    decision.seen, decision.outcome = again, None
    return True


def set_policy(
    s: Session, decision: Decision, policy: str, *, event: str, reason: str | None
) -> Decision:
    """Switch one decided job's recovery policy, fenced and audited as ``event``."""
    if decision.outcome is None and decision.seen is not None:
        before = decision.seen["recovery_policy"]
        _fenced_write(
            s,
            decision,
            "set_policy",
            {"policy": policy, "event": event},
            action=event,
            reason=reason,
            done=(event, f"{before} -> {policy}"),
        )
    return decision


def _fenced_write(
    s: Session,
    decision: Decision,
    statement: str,
    params: Row,
    *,
    action: str,
    reason: str | None,
    done: tuple[str, str],
    becomes: str | None = None,
) -> None:
    """One UPDATE fenced on the row exactly as read, its audit event in the same transaction.

    0 rows means the row is no longer as read: ``conflict``, nothing written. A row lock held
    past lock_timeout: ``locked``, naming the session that holds it. What was written is
    compared with what was meant (``becomes``, the status the write sets): a row the fence
    matched that an application trigger kept back (its NULL) or changed (another status) is
    ``kept_back``, and the transaction rolled back, the history's event with it. Else ``done``.
    """
    assert decision.seen is not None
    seen = db.json_parameter([{k: decision.seen[k] for k in FENCE}])
    try:
        with db.mapped_errors():
            try:
                with s.transaction(action=action, reason=reason):
                    _require_audit(s)
                    written = s.rows(statement, {**params, "seen": seen})
                    _written_as_meant(s, written, seen, becomes)
                    updated = len(written)
            except _KeptBack as kept:
                decision.outcome, decision.detail = "kept_back", f"{kept}; nothing written"
                return
            except psycopg.errors.SerializationFailure as exc:
                # a table partitioned by status: a worker's transition moved the row to
                # another partition while this write waited for it (SQLSTATE 40001)
                if not db.moved_to_another_partition(exc):
                    raise
                updated = 0
            except psycopg.errors.RaiseException as exc:
                # a history trigger made by an older jobctl knows no cancel: it refused the
                # change, the transaction rolled back
                if action != "cancel" or "does not describe" not in str(exc):
                    raise
                raise errors.SchemaMissing(
                    "jobctl's history trigger on this table predates cancel and refused to "
                    "record it (nothing written): run 'jobctl schema apply' to update it"
                ) from None
    except errors.LockTimeout:
        with s.transaction(read_only=True):
            row = s.row("manual_lockers", {"id": decision.id})
        holder = row["locked_by"] if row and row["locked_by"] else "another session"
        decision.outcome, decision.detail = "locked", f"row locked by {holder}; nothing written"
        return
    if updated == 1:
        decision.outcome, decision.detail = done
    else:
        decision.outcome = "conflict"
        decision.detail = "the row changed since it was read; nothing written"


class _KeptBack(Exception):
    """What an operator write meant was not written (an application trigger): rolled back."""


def _written_as_meant(s: Session, written: list[Row], seen: str, becomes: str | None) -> None:
    """Raise ``_KeptBack`` when the fenced UPDATE's rows say the write did not happen as
    meant: no row while the row is still as read (kept back), or another status."""
    if not written:
        if s.one("manual_fence_holds", {"seen": seen})["holds"]:
            raise _KeptBack("an application trigger or rule kept it back (the row is as read)")
        return
    status = written[0].get("status")
    if becomes is not None and status is not None and status != becomes:
        raise _KeptBack(
            f"an application trigger changed it ({safe_text.visible(str(status))}, not "
            f"{safe_text.visible(becomes)})"
        )


def _require_audit(s: Session) -> None:
    """jobctl's write names itself in jobctl_action and the history trigger records it: with
    the trigger missing or disabled the action could not be audited (and the marker would
    stay in the row), so it is refused. The worker history is not needed (see
    schema apply --no-worker-history)."""
    from jobctl.schema import history  # the writes alone: a listing or a plan needs none

    state = history.table_state(s.conn, s.table.oid)
    if state.mode is None or not state.enabled or state.missing_columns:
        raise errors.SchemaMissing(
            "jobctl's audit trigger is not installed or disabled, so this action could not be "
            "audited: run 'jobctl schema apply' (--no-worker-history installs only the audit)"
        )
