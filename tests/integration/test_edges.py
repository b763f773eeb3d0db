"""The rough edges of a real retrofit (Kill Bill's ``notifications`` table): each one as a
user met it, and what jobctl does now."""

from __future__ import annotations

import json

import pytest
from helpers import add_jobs, claim_all


def policy_of(conn, job_id: int) -> str:
    return conn.execute("SELECT recovery_policy FROM jobs WHERE id = %s", (job_id,)).fetchone()[
        "recovery_policy"
    ]


def test_policy_without_a_direction_is_refused_and_writes_nothing(conn, run):
    (job,) = add_jobs(conn, 1, policy="manual")
    result = run("policy", str(job), "--yes")
    assert result.code == 2
    assert "--auto or --manual" in result.err and result.out == ""
    assert policy_of(conn, job) == "manual"  # never the unsafe default
    result = run("policy", "--kind", "charge_card", "--reason", "r")
    assert result.code == 2 and "--auto or --manual" in result.err
    assert run("policy", str(job), "--auto", "--yes").code == 0
    assert policy_of(conn, job) == "auto"


def test_a_word_where_ids_go_gets_did_you_mean(conn, run):
    (job,) = add_jobs(conn, 1)
    for args in (["policy", "--kind", "charge_card", "manual"], ["policy", str(job), "manual"]):
        result = run(*args)
        assert result.code == 2, result
        assert "did you mean --manual?" in result.err
        assert "not both" not in result.err and "Traceback" not in result.err
    result = run("requeue", str(job), "force", "--yes")
    assert result.code == 2 and "did you mean --force?" in result.err
    assert policy_of(conn, job) == "auto"


def test_an_unknown_event_filter_is_refused_and_a_comma_list_is_two(conn, dsn, run):
    auto = add_jobs(conn, 2)
    manual = add_jobs(conn, 1, policy="manual")
    claim_all(dsn, 3, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert run("requeue", str(manual[0]), "--reason", "safe", "--yes").code == 0
    result = run("events", "--event", "reclaimd")
    assert result.code == 2 and result.out == ""
    assert "did you mean reclaimed?" in result.err and "requeued" in result.err
    assert run("events", "--event", "claimed").code == 2  # attempts, never events
    both = json.loads(run("events", "--event", "reclaimed,requeued", "-o", "json").out)
    assert sorted(e["event"] for e in both) == ["reclaimed"] * 3 + ["requeued"]
    repeated = json.loads(
        run("events", "--event", "reclaimed", "--event", "requeued", "-o", "json").out
    )
    assert repeated == both and {e["id"] for e in both} == {*auto, *manual}
    # the bulk writes' --status: a comma list too, an unknown value refused
    assert run("requeue", "--status", "failed,nosuch", "--error", "x", "--yes").code == 2
    assert run("requeue", "--status", "failed,queued", "--error", "x", "--yes").code == 0


def test_stuck_footers_count_everything_not_the_rows_shown(conn, dsn, run):
    add_jobs(conn, 34)
    claim_all(dsn, 4, worker="w1", lease_seconds=-60)  # 4 expired
    claim_all(dsn, 30, worker="w2", lease_seconds=600)
    conn.execute("UPDATE jobs SET lease_expires_at = NULL WHERE reserved_by = 'w2'")  # no lease
    result = run("stuck", "--limit", "6")
    assert result.code == 0, result.err
    assert "30 processing job(s) have no lease, 2 of them shown (claimed" in result.err
    assert "showing 6 of 34 job(s)" in result.err
    whole = run("stuck")
    assert "30 processing job(s) have no lease (claimed" in whole.err
    assert "showing" not in whole.err
    # a filter narrows the count as it narrows the rows
    assert "showing" not in run("stuck", "--worker", "w1", "--limit", "4").err
    assert "showing 1 of 30" in run("stuck", "--worker", "w2", "--limit", "1").err


def test_a_domain_over_a_served_type_is_served_as_its_base_type(conn, dsn, run):
    # Kill Bill's datetime: a domain over timestamp, for available_at and finished_at
    conn.execute("CREATE DOMAIN public.datetime AS timestamp without time zone")
    conn.execute(
        "ALTER TABLE jobs ALTER COLUMN available_at TYPE public.datetime, "
        "ALTER COLUMN finished_at TYPE public.datetime"
    )
    result = run("schema", "apply", "--yes")
    assert result.code == 0, result.err
    assert run("schema", "check").code == 0
    auto = add_jobs(conn, 2)
    claim_all(dsn, 2, lease_seconds=-60)
    assert run("reclaim", "--commit", "--yes").code == 0
    assert run("fail", str(auto[0]), "--reason", "r", "--yes").code == 0
    assert conn.execute(
        "SELECT finished_at IS NOT NULL AS f FROM jobs WHERE id = %s", (auto[0],)
    ).fetchone()["f"]
    assert run("requeue", str(auto[0]), "--delay", "1h", "--reason", "r", "--yes").code == 0
    row = conn.execute(
        "SELECT available_at > localtimestamp + interval '50 minutes' AS later, "
        "finished_at IS NULL AS unfinished FROM jobs WHERE id = %s",
        (auto[0],),
    ).fetchone()
    assert row["later"] and row["unfinished"]


def test_a_domain_refusing_what_jobctl_writes_is_refused_naming_it(conn, run):
    conn.execute("CREATE DOMAIN public.stamp AS timestamptz NOT NULL")
    conn.execute("UPDATE jobs SET reserved_at = now()")
    conn.execute("ALTER TABLE jobs ALTER COLUMN reserved_at TYPE public.stamp")
    result = run("schema", "apply", "--yes")
    assert result.code == 2, result
    assert "reserved_at" in result.err and "stamp" in result.err and "NULL" in result.err


# Kill Bill's notifications queue (killbill-commons' queue ddl.sql, on PostgreSQL)
KILL_BILL = """
CREATE DOMAIN public.datetime AS timestamp without time zone;
CREATE TABLE public.notifications (
    record_id serial unique,
    class_name varchar(256) NOT NULL,
    event_json varchar(2048) NOT NULL,
    user_token varchar(36),
    created_date datetime NOT NULL,
    creating_owner varchar(50) NOT NULL,
    processing_owner varchar(50) DEFAULT NULL,
    processing_available_date datetime DEFAULT NULL,
    processing_state varchar(14) DEFAULT 'AVAILABLE',
    error_count int DEFAULT 0,
    search_key1 bigint default null,
    search_key2 bigint default null,
    queue_name varchar(64) NOT NULL,
    effective_date datetime NOT NULL,
    future_user_token varchar(36),
    PRIMARY KEY(record_id)
);
INSERT INTO public.notifications (class_name, event_json, created_date, creating_owner,
    processing_owner, processing_available_date, processing_state, queue_name, effective_date)
SELECT (ARRAY['InvoiceNotification', 'PaymentRetry'])[1 + i % 2], '{}', now(), 'kb-node-1',
       NULL, now(), (ARRAY['AVAILABLE', 'PROCESSED', 'FAILED', 'REMOVED'])[1 + i % 4],
       'invoice-queue', now()
FROM generate_series(1, 104) AS i;
ALTER TABLE public.notifications ADD COLUMN max_attempts integer NOT NULL DEFAULT 3,
    ADD COLUMN reserved_at timestamptz, ADD COLUMN last_error text,
    ADD COLUMN finished_at timestamptz, ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
"""
KB_MAPPING = (
    "--column", "id=record_id", "--column", "status=processing_state",
    "--column", "available_at=processing_available_date",
    "--column", "reserved_by=processing_owner", "--column", "attempts=error_count",
    "--status", "queued=AVAILABLE", "--status", "processing=IN_PROCESSING",
    "--status", "done=PROCESSED", "--status", "failed=FAILED",
)  # fmt: skip


def kill_bill(conn) -> None:
    conn.execute(KILL_BILL)


def test_the_missing_id_error_names_the_primary_key(conn, run):
    kill_bill(conn)
    result = run("--table", "notifications", "schema", "apply", "--yes",
                 "--column", "status=processing_state")  # fmt: skip
    assert result.code == 2
    assert "--column id=record_id" in result.err and "primary key is record_id" in result.err


def test_schema_check_lists_every_status_held_and_one_verdict_on_apply(conn, run):
    kill_bill(conn)
    before = json.loads(run("--table", "notifications", "schema", "check", "-o", "json").out)
    said = {c["check"]: c for c in before}
    assert said["schema apply"]["ok"] is False  # no status column 'status' yet
    # while apply refuses the table, no other check tells the operator to run it
    assert not [c for c in before if "run jobctl schema apply" in c["detail"]]
    assert not [c for c in before if "schema apply installs it" in c["detail"]]
    assert run("--table", "notifications", "schema", "apply", "--yes", *KB_MAPPING).code == 0
    after = json.loads(run("--table", "notifications", "schema", "check", "-o", "json").out)
    held = {c["check"]: c for c in after}["status values the table holds"]["detail"]
    for value in ("AVAILABLE", "PROCESSED", "FAILED", "REMOVED"):
        assert repr(value) in held, held
    assert "'REMOVED' no status of the mapping names" in held


def test_a_partial_column_on_a_mapped_table_merges_into_its_names(conn, run):
    kill_bill(conn)
    kb = ("--table", "notifications")
    assert run(*kb, "schema", "apply", "--yes", *KB_MAPPING).code == 0
    result = run(*kb, "schema", "apply", "--yes",
                 "--column", "kind=class_name", "--column", "queue=queue_name")  # fmt: skip
    assert result.code == 0, result.err
    names = {c["check"]: c for c in json.loads(run(*kb, "schema", "check", "-o", "json").out)}
    said = names["the table's names"]["detail"]
    for part in ("id = record_id", "status = processing_state", "kind = class_name",
                 "queue = queue_name", "status queued = AVAILABLE"):  # fmt: skip
        assert part in said, said
    stuck = run(*kb, "stuck", "--kind", "PaymentRetry", "-o", "json")
    assert stuck.code == 0, stuck.err


@pytest.mark.parametrize(
    ("args", "known"),
    [
        (["events", "--event", "reclaimd"], "reclaimed"),
        (["events", "--event", "reclaimed,requeud"], "requeued"),
        (["stuck", "--policy", "manul"], "manual"),
        (["review", "--policy", "x"], "manual"),
        (["reclaim", "--policy", "x"], "manual"),
        (["summary", "--by", "kinds"], "worker"),
        (["requeue", "--status", "parkd", "--error", "x", "--yes"], "parked"),
        (["schema", "apply", "--history", "full", "--sql"], "transitions"),
        (["stuck", "--notify-env", "X", "--notify-format", "teams"], "slack"),
    ],
)
def test_every_enumerated_filter_refuses_an_unknown_value_naming_the_known(run, args, known):
    result = run(*args)
    assert result.code == 2, result
    assert known in result.err and result.out == ""
