"""doctor's reading of the catalog's writes (jobctl/ops/doctor_catalog.py): a view's columns
as the table's, rules' actions and triggers' PL/pgSQL statements judged, and what cannot be
read said so; on strings as the server prints them, no database."""

from __future__ import annotations

from jobctl.ops import doctor_catalog as catalog
from jobctl.ops import doctor_statements as judge

JOBS = judge.Table("jobs", "public", {})


def test_a_views_columns_as_the_tables():
    jv = catalog.view_columns(
        " SELECT jobs.id,\n    jobs.status,\n    jobs.reserved_by AS attempt_token\n   FROM jobs;",
        ["id", "status", "attempt_token"],
    )
    assert jv["attempt_token"] == ((None, "jobs"), "reserved_by")
    jv2 = catalog.view_columns(
        " SELECT v.id, v.status, v.attempt_token, v.id + 1 AS next FROM app.jv v;",
        ["id", "status", "attempt_token", "next"],
    )
    assert jv2["next"] is None and jv2["attempt_token"] == (("app", "jv"), "attempt_token")
    union = catalog.view_columns("SELECT id FROM jobs UNION SELECT id FROM jobs", ["id"])
    assert union == {"id": None}
    assert catalog.view_columns("not sql", ["id"]) == {"id": None}
    mapped = catalog.views_on_the_table({("app", "jv2"): jv2, ("app", "jv"): jv}, JOBS)
    assert mapped[("app", "jv2")] == {
        "id": "id",
        "status": "status",
        "attempt_token": "reserved_by",
        "next": None,
    }
    other = catalog.view_columns("SELECT x.id FROM other.jobs x", ["id"])
    assert catalog.views_on_the_table({("app", "o"): other}, JOBS) == {("app", "o"): {"id": None}}


RULE = {
    "schema": "app",
    "relation": "done_log",
    "name": "completes",
    "definition": "CREATE RULE completes AS\n    ON INSERT TO app.done_log DO  UPDATE public.jobs "
    "SET status = 'done'::text\n  WHERE (jobs.id = new.job_id);",
    "chars": 120,
}
FUNCTION = """CREATE OR REPLACE FUNCTION app.beat()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE public.jobs SET lease_expires_at = now() WHERE id = NEW.job_id;
    UPDATE public.jobs SET status = 'done' WHERE id = NEW.job_id AND attempt_token = NEW.token;
    RETURN NEW;
END $function$
"""


def trigger(definition: str, language: str = "plpgsql") -> dict:
    return {
        "schema": "app",
        "relation": "beats",
        "name": "beats",
        "function": "app.beat",
        "language": language,
        "definition": definition,
        "chars": len(definition),
    }


def test_rules_and_triggers_judged_as_statements():
    found = catalog.hooks([RULE], [trigger(FUNCTION)], JOBS, limit=65_536, kept=4096)
    assert [(f["kind"], f["source"], f["name"], f["relation"]) for f in found] == [
        ("unfenced_update", "rule", "completes", "app.done_log"),
        ("unfenced_update", "trigger", "beats", "app.beats"),
    ]
    assert found[1]["function"] == "app.beat" and "lease_expires_at" in found[1]["statement"]
    assert "check" in found[0] and found[0]["fix"]


def test_what_a_trigger_hides_is_to_be_checked_by_hand():
    dynamic = FUNCTION.replace(
        "RETURN NEW;", "EXECUTE 'UPDATE public.jobs SET status = $1' USING 'done'; RETURN NEW;"
    )
    python = trigger("plpy.execute('UPDATE jobs SET status = 1')", "plpython3u")
    cut = {**trigger(FUNCTION), "chars": 10_000_000}
    found = catalog.hooks(
        [], [trigger(dynamic), python, cut, trigger("x", "c")], JOBS, limit=65_536, kept=4096
    )
    assert [f["kind"] for f in found] == ["unparsed"] * 3
    assert "dynamic SQL (EXECUTE)" in found[0]["why"]
    assert "LANGUAGE plpython3u" in found[1]["why"]
    assert found[2]["why"].startswith("cut: 10000000 characters")
    # a function that neither writes nor names the table is nothing to check
    quiet = trigger("plpy.notice('hello')", "plpython3u")
    assert catalog.hooks([], [quiet], JOBS, limit=65_536, kept=4096) == []
