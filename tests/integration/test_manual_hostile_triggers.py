"""An operator write (requeue, fail, cancel) against the application's triggers that keep it
back (a BEFORE trigger's NULL) or change it (a later BEFORE trigger putting the row back):
reported as ``kept_back`` (exit 1), the write's transaction rolled back, so the history holds
no event for a transition that did not happen."""

from __future__ import annotations

import json

import pytest
from helpers import add_jobs, claim_all

# run after jobctl's history trigger (triggers fire in name order): a NULL for one job, and
# the row put back as it was for another
TRIGGERS = """
    CREATE FUNCTION zz_evil() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.id = {vetoed} THEN RETURN NULL; END IF;
        IF NEW.id = {undone} THEN RETURN OLD; END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER zz_evil BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION zz_evil();
"""


@pytest.mark.parametrize(
    "command",
    [
        ("fail", "--force", "--yes", "--reason", "stuck"),
        ("cancel", "--yes", "--reason", "stuck"),
    ],
)
def test_a_write_a_trigger_keeps_back_or_undoes_is_not_reported_nor_recorded(
    conn, dsn, run, command
):
    add_jobs(conn, 3)
    vetoed, undone, honest = (c.id for c in claim_all(dsn, 3))
    conn.execute(TRIGGERS.format(vetoed=vetoed, undone=undone))
    before = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    events = conn.execute("SELECT count(*) AS n FROM jobctl.events").fetchone()["n"]
    verb, *options = command
    result = run(verb, str(vetoed), str(undone), str(honest), *options, "-o", "json")
    assert result.code == 1, result
    rows = {r["id"]: r for r in json.loads(result.out)}
    assert rows[vetoed]["outcome"] == "kept_back", rows
    assert "kept it back" in rows[vetoed]["detail"]
    assert rows[undone]["outcome"] == "kept_back", rows
    assert "changed it (processing, not failed)" in rows[undone]["detail"]
    assert rows[honest]["outcome"] in ("failed", "cancelled"), rows
    after = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    assert [r for r in after if r["id"] != honest] == [r for r in before if r["id"] != honest]
    recorded = conn.execute("SELECT job_id FROM jobctl.events").fetchall()
    assert len(recorded) == events + 1 and recorded[-1]["job_id"] == str(honest)
    assert "kept back" in result.err
