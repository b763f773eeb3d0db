"""``jobctl doctor``'s findings: each kind of statement the lease design's rules refuse, the
check it fails, what is wrong with it and the fix (the rendered statement that replaces it).
Pure data, read by the judge (``doctor_statements``) and the checklist (``doctor``)."""

from __future__ import annotations

from typing import Any

# finding kind -> (check, what is wrong, the fix: which rendered statement replaces it)
KINDS: dict[str, tuple[str, str, str]] = {
    "claim_without_skip_locked": (
        "fenced_writes",
        "a claim without FOR UPDATE SKIP LOCKED: two workers can claim the same job, or "
        "queue up behind each other's locks",
        "claim",
    ),
    "claim_without_lease": (
        "fenced_writes",
        "a claim that sets no new attempt token and lease: its jobs are processing with no "
        "lease, which reclaim never sees (jobctl stuck -o wide lists them as no lease)",
        "claim",
    ),
    "claim_ignores_pauses": (
        "fenced_writes",
        "a claim that does not read jobctl.pauses: its workers still claim the kinds and "
        "queues jobctl pause stopped (it was written before pauses, or by hand)",
        "claim",
    ),
    "sweeper_by_age": (
        "timeout_by_lease",
        "a sweeper that sets jobs back to queued (or another status) by age (reserved_at, "
        "heartbeat_at, updated_at or another time of the row), not by lease_expires_at: it "
        "takes back jobs whose workers are alive and heartbeating, and bypasses the fence",
        "stop it: jobctl reclaim --commit --yes --every 30s is the design's reclaim (by "
        "lease_expires_at, fenced on the token; workers heartbeat to keep their lease)",
    ),
    "claim_by_age": (
        "timeout_by_lease",
        "a claim that also takes jobs back by the age of their lock or start (reserved_at, "
        "heartbeat_at or updated_at against a time, as Delayed::Job's max_run_time), not by "
        "lease_expires_at: it cannot tell a slow job from a dead worker, takes the job of a "
        "worker that is alive, and nothing stops that worker's late writes",
        "claim only ready jobs with the design's claim, which gives each a lease and a token "
        "(jobctl schema statements prints it); workers heartbeat to extend the lease, and "
        "jobctl reclaim takes back the jobs whose lease ran out (by lease_expires_at, fenced "
        "on the token)",
    ),
    "unfenced_update": (
        "fenced_writes",
        "an UPDATE that ends, extends or gives back an attempt without attempt_token = $n in "
        "its WHERE: a worker whose job was reclaimed still overwrites the new attempt's row",
        "complete / heartbeat / fail",
    ),
    "fence_cast": (
        "fenced_writes",
        "a fence that compares attempt_token through a cast or a function: a cast to a "
        "domain or another schema's type brings that type's own = (which may always be "
        "true), and a cast with a length, through text or a function compares a part of the "
        "token, so another attempt's completion still lands",
        "compare the column itself with the token as uuid, with the system's =: "
        "attempt_token OPERATOR(pg_catalog.=) $n::pg_catalog.uuid (as complete does)",
    ),
    "hand_requeue": (
        "fenced_writes",
        "a hand SET status (a requeue) with no token: it races a live worker, whose late "
        "completion then lands on the requeued job",
        "jobctl requeue ID (fenced on the token and the row's version)",
    ),
    "delete_processing": (
        "fenced_writes",
        "a DELETE that can take processing rows: the job vanishes under its worker, and no "
        "history records why",
        "jobctl fail ID (or delete only finished jobs: status test on done/failed)",
    ),
    "delete_status_unknown": (
        "fenced_writes",
        "a DELETE whose status test is a parameter: it may take processing rows, and the "
        "statistics cannot tell (they write every value as $n)",
        "check by hand which statuses it is run with (only finished jobs: done/failed)",
    ),
    "unparsed": (
        "fenced_writes",
        "could not parse: check by hand. A statement that may write the jobs table, which "
        "doctor could not read",
        "check it by hand (its queryid finds it in pg_stat_statements), and rewrite it in a "
        "form that PostgreSQL's current grammar parses, whole and shorter",
    ),
}
# the kinds whose fix (in words) is a rendered statement not named by the fix alone: kind ->
# that statement's name (the finding's fix_sql in -o json)
FIX_STATEMENT = {"claim_by_age": "claim"}
# the kinds that make their check warn, not fail: what the statistics cannot tell
WARN_ONLY = frozenset({"delete_status_unknown"})


def finding(kind: str, about: dict[str, Any], why: str | None) -> dict[str, Any]:
    """One finding of ``kind`` about a statement, rule or trigger (``about``: what names it):
    its check, what is wrong (with ``why``, the judge's reason, when it gave one) and the fix."""
    check, wrong, fix = KINDS[kind]
    found = {"check": check, "kind": kind, **about, "wrong": wrong, "fix": fix}
    if why:
        found["wrong"] = f"{wrong} ({why})"
        found["why"] = why
    return found
