"""A write nested in a trigger of the application's that jobctl's own statement fired is not
recorded as the operator's, and the settings such a trigger changes do
not relabel the operator's later rows: docs/history.md, Nested writes."""

from __future__ import annotations

import json

import pytest
from helpers import add_jobs, claim_all, grant_roles
from psycopg import conninfo

ALICE = "alice (on-call lead)"
FORGED = "approved in the incident channel"

# the table owner's trigger: on the first row of jobctl's statement it sees, it declares Alice
# and a reason of its own for the rest of the transaction, and cancels another live job
SIDE_EFFECT = """
CREATE FUNCTION app_side_effect() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF coalesce(current_setting('app.done', true), '') = '' THEN
        PERFORM set_config('app.done', 'yes', true);
        PERFORM set_config('jobctl.actor', 'alice (on-call lead)', true);
        PERFORM set_config('jobctl.reason', 'approved in the incident channel', true);
        UPDATE jobs SET jobctl_action = 'cancelled', status = 'failed', attempt_token = NULL
        WHERE id = %(victim)s;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER {name} {timing} UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION app_side_effect();
"""


def events(run, job_id: int) -> list[dict]:
    result = run("history", str(job_id), "-o", "json")
    assert result.code == 0, result.err
    return [e for e in json.loads(result.out)["events"] if e["event"] != "claimed"]


def reclaim_under_the_owners_trigger(conn, dsn, run, roles, name: str, timing: str):
    """Four expired jobs and a live one (the victim), the owner's trigger, then the operator
    role's ``reclaim --commit``: the reclaimed ids and the victim's. (A test takes ``roles``
    first among its fixtures: the roles are dropped after its database.)"""
    assert grant_roles(run, roles).code == 0
    expired = add_jobs(conn, 4)
    claim_all(dsn, 4)
    (victim,) = add_jobs(conn, 1)
    claim_all(dsn, 1, worker="w2", lease_seconds=300)
    conn.execute(SIDE_EFFECT.replace("%(victim)s", str(victim)).format(name=name, timing=timing))
    operator = conninfo.make_conninfo(dsn, user=roles["operator"])
    result = run(
        "--actor", "bob@ops", "reclaim", "--commit", "--yes", "--batch-size", "10", dsn=operator
    )
    assert result.code == 0, result.err
    return expired, victim


def assert_nested_cancel_is_the_logins(run, victim: int, login: str) -> None:
    (cancel,) = events(run, victim)
    # recorded as what the row shows, by the role that made it: not Alice's cancel
    assert (cancel["event"], cancel["actor"], cancel["db_role"]) == ("failed", login, login)
    assert cancel["claimed"] == {
        "nested": True,
        "actor": ALICE,
        "action": "cancelled",
        "reason": FORGED,
    }


@pytest.mark.parametrize(
    ("name", "timing"),
    [("zz_app_side_effect", "BEFORE"), ("app_side_effect", "AFTER")],
    ids=["before-row-after-jobctls", "after-row"],
)
def test_a_nested_write_is_not_the_operators_and_does_not_relabel_its_rows(
    roles, conn, dsn, run, name, timing
):
    expired, victim = reclaim_under_the_owners_trigger(conn, dsn, run, roles, name, timing)
    login = roles["operator"]
    assert_nested_cancel_is_the_logins(run, victim, login)
    reclaims = [e for job in expired for e in events(run, job)]
    assert [e["event"] for e in reclaims] == ["reclaimed"] * 4
    # the operator's four reclaims keep the operator's actor and reclaim's reason
    assert {e["actor"] for e in reclaims} == {"bob@ops"}
    assert {e["db_role"] for e in reclaims} == {login}
    assert not any(FORGED in (e["reason"] or "") for e in reclaims)
    # those the history recorded after the trigger changed the settings say so
    changed = [e["claimed"] for e in reclaims if e["claimed"]]
    if timing == "AFTER":  # after-row triggers run once the statement's rows are written
        assert changed == []
    else:  # the first row was recorded before the trigger ran on it
        assert (
            changed
            == [{"actor": ALICE, "action": "reclaimed", "reason": FORGED, "changed": True}] * 3
        )


def test_a_trigger_that_runs_before_jobctls_first_row_still_relabels_it(roles, conn, dsn, run):
    """The residual (docs/history.md, Nested writes): the settings a BEFORE trigger of the
    owner's changes before jobctl's trigger saw any row are all the history has of the
    declarations; the nested write is still told as the login's."""
    expired, victim = reclaim_under_the_owners_trigger(
        conn, dsn, run, roles, "aa_app_side_effect", "BEFORE"
    )
    assert_nested_cancel_is_the_logins(run, victim, roles["operator"])
    reclaims = [e for job in expired for e in events(run, job)]
    assert {(e["actor"], e["reason"], e["db_role"]) for e in reclaims} == {
        (ALICE, FORGED, roles["operator"])
    }
