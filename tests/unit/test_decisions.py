"""The eligibility rules of operator writes, as pure functions (the docs' table)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from jobctl.ops import manual

TOKEN = uuid.UUID(int=7)
LATER = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)


def job(status: str, lease_state: str = "none", **more) -> dict:
    return {
        "status": status,
        "lease_state": lease_state,
        "attempt_token": TOKEN if status == "processing" else None,
        "lease_expires_at": LATER if lease_state == "live" else None,
        "reserved_by": "w1" if status == "processing" else None,
        "recovery_policy": "manual",
        **more,
    }


@pytest.mark.parametrize(
    ("seen", "action", "force", "outcome"),
    [
        (job("queued"), "requeue", False, "refused"),
        (job("queued"), "fail", False, None),  # a cancel
        (job("processing", "expired"), "requeue", False, None),
        (job("processing", "expired"), "fail", False, None),
        (job("processing", "live"), "requeue", False, "refused"),
        (job("processing", "live"), "requeue", True, None),
        (job("processing", "live"), "fail", True, None),
        (job("processing", "none"), "requeue", False, None),
        # a claim with no lease within the hour (lease_less_recent): as a live lease
        (job("processing", "none", lease_less_recent=True), "requeue", False, "refused"),
        (job("processing", "none", lease_less_recent=True), "fail", False, "refused"),
        (job("processing", "none", lease_less_recent=True), "requeue", True, None),
        (job("processing", "none", lease_less_recent=True), "fail", True, None),
        (job("processing", "none", lease_less_recent=True), "cancel", False, None),
        (job("processing", "none", lease_less_recent=False), "fail", False, None),
        (job("failed"), "requeue", False, None),
        (job("failed"), "fail", False, "refused"),
        (job("done"), "requeue", True, "refused"),
        (job("done"), "fail", True, "refused"),
    ],
)
def test_eligibility(seen, action, force, outcome):
    assert manual.refusal(seen, action, force=force, expect_token=None)[0] == outcome


def test_a_live_lease_names_its_worker_and_the_way_out():
    outcome, detail = manual.refusal(
        job("processing", "live"), "fail", force=False, expect_token=None
    )
    assert outcome == "refused" and "w1" in detail and "--force" in detail and "2030" in detail


@pytest.mark.parametrize(
    ("age", "said"),
    [
        (12.3, "no lease, claimed 12s ago by w1: "),
        (None, "no lease, no claim time jobctl can read by w1: "),
        (-2.0, "no lease, claimed at a time ahead of the server's clock by w1: "),
    ],
)
def test_a_recent_claim_with_no_lease_says_its_age_and_the_way_out(age, said):
    seen = job("processing", "none", lease_less_recent=True, claimed_age_s=age)
    outcome, detail = manual.refusal(seen, "fail", force=False, expect_token=None)
    assert outcome == "refused"
    assert detail == said + "its worker may still be running it (--force overrides)"


def test_expect_token_mismatch_is_a_conflict_before_anything_else():
    other = uuid.UUID(int=8)
    outcome, detail = manual.refusal(job("done"), "requeue", force=False, expect_token=other)
    assert outcome == "conflict" and str(other) in detail
    assert manual.refusal(
        job("processing", "expired"), "requeue", force=False, expect_token=TOKEN
    ) == (None, "")


@pytest.mark.parametrize(
    ("status", "policy", "wanted", "outcome"),
    [
        ("done", "auto", "manual", "refused"),
        ("failed", "manual", "manual", "refused"),
        ("failed", "manual", "auto", None),
        ("processing", "auto", "manual", None),
    ],
)
def test_policy_eligibility(status, policy, wanted, outcome):
    seen = job(status, recovery_policy=policy)
    assert manual.policy_refusal(seen, wanted)[0] == outcome


OWN = manual.TableMapping.parse(
    statuses=["queued=pending", "processing=running", "done=completed"],
    park_status="manual_review",
)


@pytest.mark.parametrize(
    ("status", "action", "outcome"),
    [
        ("pending", "requeue", "refused"),  # the table's queued
        ("completed", "fail", "refused"),  # its done
        ("failed", "fail", "refused"),
        ("manual_review", "requeue", None),  # parked: taken like a failed job
        ("manual_review", "fail", None),  # and failing it moves it to failed
        ("queued", "requeue", "refused"),  # a status of the application's own: left alone
    ],
)
def test_eligibility_speaks_the_tables_statuses(status, action, outcome):
    seen = job(status)
    assert manual.refusal(seen, action, force=False, expect_token=None, mapping=OWN)[0] == outcome
    assert (manual.policy_refusal(seen, "auto", mapping=OWN)[0] == "refused") == (
        status == "completed"
    )
