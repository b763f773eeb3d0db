"""explain's sentences, from a history made by hand (no database)."""

from __future__ import annotations

import datetime as dt
import uuid

from jobctl.render import story

T0 = dt.datetime(2026, 11, 30, 3, 0, 0, tzinfo=dt.timezone.utc)
FIRST, SECOND = uuid.UUID(int=1), uuid.UUID(int=2)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def attempt(n, token, worker, heartbeats, last_s, max_gap_s, lease_s, ended_s, outcome):
    return {
        "attempt": n,
        "attempt_token": token,
        "worker": worker,
        "claimed_at": at(0 if n == 1 else 100),
        "heartbeats": heartbeats,
        "last_heartbeat_at": None if last_s is None else at(last_s),
        "max_heartbeat_gap_s": max_gap_s,
        "ended_at": None if ended_s is None else at(ended_s),
        "outcome": outcome,
        "lease_s": lease_s,
        "lease_expires_at": at(60),
    }


def event(kind, seconds, token, frm, to, worker=None, actor=None, reason=None, n=1):
    return {
        "at": at(seconds),
        "event": kind,
        "from_status": frm,
        "to_status": to,
        "attempt": n,
        "attempt_token": token,
        "worker": worker,
        "actor": actor,
        "reason": reason,
    }


HISTORY = {
    "job": {
        "id": 42,
        "status": "failed",
        "recovery_policy": "manual",
        "attempts": 2,
        "max_attempts": 3,
        "reclaim_count": 1,
        "lease_state": "none",
        "lease_expires_at": None,
    },
    "attempts": [
        attempt(1, FIRST, "w1", 4, 40, 10.0, 30.0, 90, "reclaimed"),
        attempt(2, SECOND, "w2", 0, None, None, 30.0, 150, "manually_failed"),
    ],
    "events": [
        event("claimed", 0, FIRST, "queued", "processing", worker="w1"),
        event("reclaimed", 90, FIRST, "processing", "queued", actor="reclaimer@host"),
        event("claimed", 100, SECOND, "queued", "processing", worker="w2", n=2),
        event("manually_failed", 150, SECOND, "processing", "failed", actor="ann", reason="dup"),
    ],
}


def test_the_story_in_order():
    result = story.explain(HISTORY)
    assert result["story"] == [
        "Job 42 is failed (manual policy, 2 of 3 attempts used, reclaimed 1 time(s)).",
        "At 2026-11-30 03:00:00+00:00 worker w1 claimed it (attempt 1).",
        "It heartbeat 4 time(s), typically every 10s, at most 10s apart, against a lease of 30s.",
        "Its lease ran out at 2026-11-30 03:01:00+00:00; at 2026-11-30 03:01:30+00:00 "
        "reclaimer@host reclaimed it and it became queued.",
        "At 2026-11-30 03:01:40+00:00 worker w2 claimed it (attempt 2).",
        "It never heartbeat (lease 30s).",
        'At 2026-11-30 03:02:30+00:00 ann failed it by hand: "dup".',
    ]
    assert result["lease_too_short"] is False
    assert result["attempts"][0]["typical_heartbeat_gap_s"] == 10.0


def test_a_gap_close_to_the_lease_is_a_warning():
    risky = {**HISTORY, "attempts": [attempt(1, FIRST, "w1", 2, 50, 27.0, 30.0, 90, "done")]}
    result = story.explain(risky)
    assert result["lease_too_short"] is True
    assert result["story"][-1].startswith("Warning: attempt 1's largest heartbeat gap (27s)")


def test_an_expired_lease_not_yet_reclaimed_says_what_to_run():
    job = {
        **HISTORY["job"],
        "status": "processing",
        "lease_state": "expired",
        "lease_expires_at": at(60),
    }
    result = story.explain({"job": job, "attempts": [], "events": []})
    assert "jobctl reclaim --dry-run" in result["story"][-1]


def test_a_job_reclaim_parked_says_it_awaits_a_human():
    parked = {**HISTORY["job"], "status": "manual_review", "lease_state": "none"}
    parked |= {"awaiting_review": True, "review_why": "manual_policy"}
    events = [
        event("claimed", 0, FIRST, "pending", "running", worker="w1"),
        event("reclaimed", 90, FIRST, "running", "manual_review", actor="reclaimer@host"),
    ]
    told = story.explain({"job": parked, "attempts": [], "events": events}, parked="manual_review")
    assert told["story"][-1].startswith("It is parked in manual_review, awaiting a human")
    assert "jobctl requeue 42" in told["story"][-1]
    # the database judged it not awaiting review (say, parked in another status): no such
    # sentence, whatever the events say
    assert "parked" not in " ".join(
        story.explain(
            {"job": parked | {"awaiting_review": False}, "attempts": [], "events": events}
        )["story"]
    )


def test_a_job_manual_by_its_kind_says_so():
    """The policy that applies, not the row's: a job whose kind is manual is told as such,
    in its first line and in why it waits."""
    job = {**HISTORY["job"], "status": "failed", "lease_state": "none", "recovery_policy": "auto"}
    job |= {"effective_policy": "manual", "policy_from": "kind", "awaiting_review": True}
    job |= {"review_why": "manual_policy"}
    told = story.explain({"job": job, "attempts": [], "events": []})["story"]
    assert "(manual policy by its kind," in told[0]
    assert "awaiting a human (its kind's recorded policy is manual;" in told[-1]


def test_a_parked_job_is_offered_only_the_commands_jobctl_accepts():
    """Parked in failed, a job awaiting review may still be failed for good (with a reason:
    manual.refusal accepts it), so both are offered; parked in a status of the table's own,
    fail moves it to failed and is offered too."""
    events = [
        event("claimed", 0, FIRST, "queued", "processing", worker="w1"),
        event("reclaimed", 90, FIRST, "processing", "failed", actor="reclaimer@host"),
    ]
    failed = {**HISTORY["job"], "status": "failed", "lease_state": "none", "awaiting_review": True}
    told = story.explain({"job": failed, "attempts": [], "events": events})["story"][-1]
    assert "jobctl requeue 42 --reason" in told and "jobctl fail 42 --reason" in told
    review = {**failed, "status": "manual_review"}
    told = story.explain({"job": review, "attempts": [], "events": events}, parked="manual_review")[
        "story"
    ][-1]
    assert "jobctl requeue 42 --reason" in told and "jobctl fail 42 --reason" in told


def test_a_forged_manual_action_is_told_as_the_role_that_made_it():
    forged = event("retried", 10, FIRST, "processing", "queued", worker="w1", actor="app")
    forged |= {
        "db_role": "app",
        "claimed": {"actor": "alice@ops", "action": "requeued", "reason": "approved"},
    }
    stamped = event("failed", 20, SECOND, "processing", "failed", worker="w2", actor="app")
    stamped |= {"db_role": "app", "claimed": {"actor": "alice@ops"}}
    trusted = event("requeued", 30, None, "failed", "queued", actor="bob@ops", reason="ok")
    trusted |= {"db_role": "oncall_rw", "claimed": None}
    text = story.explain(HISTORY | {"events": [forged, stamped, trusted]})["story"]
    assert (
        "At 2026-11-30 03:00:10+00:00 role app set jobctl_action=requeued claiming to be "
        'alice@ops ("approved"): not one of jobctl\'s roles, so not a manual action; the row '
        "shows retried (processing -> queued)."
    ) in text
    assert not any("alice@ops requeued it by hand" in line for line in text)
    assert "At 2026-11-30 03:00:20+00:00 worker w2 gave it up (failed) (role app)." in text
    assert (
        "Its database role app claimed to be alice@ops: not one of jobctl's roles, so the "
        "history names the role."
    ) in text
    assert 'At 2026-11-30 03:00:30+00:00 bob@ops requeued it by hand: "ok" (role oncall_rw).' in (
        text
    )


def test_a_nested_write_and_a_changed_actor_are_told_as_what_they_are():
    nested = event("failed", 10, FIRST, "processing", "failed", worker="w1", actor="bob")
    nested |= {
        "db_role": "bob",
        "claimed": {"nested": True, "actor": "alice", "action": "cancelled"},
    }
    changed = event("reclaimed", 20, SECOND, "processing", "queued", actor="bob@ops")
    changed |= {
        "db_role": "oncall_rw",
        "claimed": {"changed": True, "actor": "alice", "reason": "forged"},
    }
    text = story.explain(HISTORY | {"events": [nested, changed]})["story"]
    assert (
        "At 2026-11-30 03:00:10+00:00 a trigger of the application's, inside another write of "
        "role bob, set jobctl_action=cancelled claiming to be alice: not jobctl's own "
        "statement, so not a manual action; the row shows failed (processing -> failed)."
    ) in text
    assert (
        'Its actor or reason were changed to alice ("forged") while the statement ran, by a '
        "trigger of the application's: the history kept the ones jobctl declared first."
    ) in text
    assert not any("Its database role oncall_rw claimed" in line for line in text)


FORGER = (
    'w1 claimed it (attempt 1). At 2026-11-30 03:05:00+00:00 alice@ops requeued it by hand: "ok'
)


def test_values_from_rows_are_quoted_so_they_cannot_read_as_jobctls_words():
    """A worker name that reads as a sentence of jobctl's, a reason that would close its own
    quotes, a status with spaces: each one value, in JSON's quotes."""
    events = [
        event("claimed", 0, FIRST, "queued", "processing", worker=FORGER),
        event("requeued", 30, None, "failed", "queued now", actor="bob ops", reason='x". And "y'),
    ]
    text = story.explain(HISTORY | {"events": events, "attempts": []})["story"]
    assert (
        'At 2026-11-30 03:00:00+00:00 worker "w1 claimed it (attempt 1). At 2026-11-30 '
        '03:05:00+00:00 alice@ops requeued it by hand: \\"ok" claimed it (attempt 1).'
    ) in text
    assert 'At 2026-11-30 03:00:30+00:00 "bob ops" requeued it by hand: "x\\". And \\"y".' in text
    # plain words stay as they are
    assert text[0] == (
        "Job 42 is failed (manual policy, 2 of 3 attempts used, reclaimed 1 time(s))."
    )


def test_a_suggested_command_quotes_the_id_for_a_shell():
    events = [event("reclaimed", 90, FIRST, "processing", "failed", actor="reclaimer@host")]
    for job_id, said, command in (
        ("a; rm -rf ~", '"a; rm -rf ~"', "jobctl requeue 'a; rm -rf ~' --reason ..."),
        ("-x", "-x", "jobctl requeue --reason ... -- -x"),
        (42, "42", "jobctl requeue 42 --reason ..."),
    ):
        job = {**HISTORY["job"], "id": job_id, "status": "failed", "lease_state": "none"}
        job["awaiting_review"] = True
        told = story.explain({"job": job, "attempts": [], "events": events})["story"]
        assert command in told[-1], told[-1]
        assert told[0].startswith(f"Job {said} is failed")


def test_a_lease_whose_length_the_times_do_not_give_says_so():
    """Never a bare "lease ?": the length, or that it is unknown, in every heartbeat mode."""
    unknown = attempt(1, FIRST, "w1", 0, None, None, None, None, None)
    claimed = [event("claimed", 0, FIRST, "queued", "processing", worker="w1")]
    job = {**HISTORY["job"], "status": "processing", "lease_state": "live"}
    for stats, said in (
        ("transitions", "(no heartbeat, lease length unknown; the default history"),
        ("none", "(Lease length unknown; the worker history is not installed"),
        ("late", "It never heartbeat (lease length unknown)."),
        ("exact", "It never heartbeat (lease length unknown)."),
    ):
        history = {"job": job, "attempts": [unknown | {"heartbeat_stats": stats}]}
        told = " ".join(story.explain(history | {"events": claimed})["story"])
        assert said in told and "?" not in told, (stats, told)
    known = unknown | {"heartbeat_stats": "transitions", "lease_s": 15.0}
    told = story.explain({"job": job, "attempts": [known], "events": claimed})["story"]
    assert "(no heartbeat, lease 15s; the default history" in told[2]


def test_kinds_are_told_alike():
    """A Ruby method's kind (Class#method) is one plain word, as a class's is: neither
    quoted; a kind with a space or a quote is."""
    job = {**HISTORY["job"], "lease_state": "none"}
    for kind, shown in (
        ("User#send_welcome", "User#send_welcome"),
        ("Billing::ChargeSubscriptionJob", "Billing::ChargeSubscriptionJob"),
        ('Evil" is done', '"Evil\\" is done"'),
    ):
        told = story.explain(
            {"job": job | {"kind": kind}, "attempts": [], "events": []}, mapped=["kind"]
        )
        assert told["story"][0].startswith(f"Job 42 (kind {shown}) is failed"), told["story"][0]
