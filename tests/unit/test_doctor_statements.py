"""jobctl doctor's judge of statements (ops/doctor_statements): strings as pg_stat_statements
holds them (every constant, NULL too, as $n), parsed by PostgreSQL's parser; no database."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from jobctl.ops import doctor
from jobctl.ops import doctor_statements as judge

JOBS = judge.Table("jobs", "public", {})
RAILS = judge.Table(
    "background_tasks",
    "public",
    {
        "status": "state",
        "attempts": "tries",
        "reserved_by": "locked_by",
        "reserved_at": "locked_at",
        "available_at": "run_at",
    },
)

DESIGN_CLAIM = (
    "WITH target AS (SELECT id FROM jobs WHERE status = $1 AND available_at <= now() "
    "ORDER BY available_at, id FOR UPDATE SKIP LOCKED LIMIT $2) "
    "UPDATE jobs AS j SET status = $3, reserved_by = $4, reserved_at = now(), "
    "lease_expires_at = now() + $5::interval, attempt_token = $6, attempts = j.attempts + $7 "
    "FROM target WHERE j.id = target.id RETURNING j.id, j.attempt_token"
)


@pytest.mark.parametrize(
    "statement, kinds, fenced",
    [
        (DESIGN_CLAIM, (), None),
        (
            "UPDATE jobs SET heartbeat_at = now(), lease_expires_at = now() + $1::interval "
            "WHERE id = $2 AND status = $3 AND reserved_by = $4 AND attempt_token = $5",
            (),
            "heartbeat",
        ),
        (
            "UPDATE jobs SET status = $1, reserved_by = $2, attempt_token = $3, "
            "finished_at = now() WHERE id = $4 AND status = $5 AND attempt_token = $6::uuid",
            (),
            "completion",
        ),
        # an unfenced completion
        ("UPDATE jobs SET status = $1 WHERE id = $2", ("unfenced_update",), None),
        ("UPDATE jobs SET heartbeat_at = now() WHERE id = $1", ("unfenced_update",), None),
        # the token under an OR is no fence
        (
            "UPDATE jobs SET status = $1 WHERE id = $2 AND (attempt_token = $3 OR true)",
            ("unfenced_update",),
            None,
        ),
        # a sweeper by age
        (
            "UPDATE jobs SET status = $1, reserved_by = $2 WHERE status = $3 "
            "AND reserved_at < now() - interval $4",
            ("sweeper_by_age",),
            None,
        ),
        (
            "WITH old AS (SELECT id FROM jobs WHERE status = $1 AND heartbeat_at < now() - $2 "
            "FOR UPDATE SKIP LOCKED) UPDATE jobs j SET status = $3 FROM old WHERE j.id = old.id",
            ("sweeper_by_age",),
            None,
        ),
        # reclaim by the lease is no sweeper by age (updated_at written is not tested)
        (
            "UPDATE jobs SET status = $1, updated_at = now() WHERE status = $2 "
            "AND lease_expires_at < now() AND attempt_token = $3",
            (),
            None,
        ),
        # a reclaim by the lease but with no token fence
        (
            "WITH expired AS (SELECT id FROM jobs WHERE status = $1 AND lease_expires_at < now() "
            "FOR UPDATE SKIP LOCKED) UPDATE jobs j SET status = $2, attempt_token = $3, "
            "lease_expires_at = $4 FROM expired WHERE j.id = expired.id",
            ("unfenced_update",),
            None,
        ),
        # the design's reclaim: fenced on the token as the CTE read it
        (
            "WITH expired AS (SELECT id, attempt_token FROM jobs WHERE status = $1 AND "
            "lease_expires_at < now() FOR UPDATE SKIP LOCKED) UPDATE jobs j SET status = $2, "
            "attempt_token = $3, lease_expires_at = $4, reclaim_count = j.reclaim_count + $5 "
            "FROM expired WHERE j.id = expired.id AND j.attempt_token = expired.attempt_token",
            (),
            None,
        ),
        # a hand requeue
        (
            "UPDATE jobs SET status = $1, attempt_token = $2, lease_expires_at = $3 WHERE id = $4",
            ("hand_requeue",),
            None,
        ),
        # claims of old code
        (
            "UPDATE jobs SET status = $1, reserved_by = $2, reserved_at = now() "
            "WHERE id = (SELECT id FROM jobs WHERE status = $3 ORDER BY id LIMIT $4)",
            ("claim_without_skip_locked", "claim_without_lease"),
            None,
        ),
        (
            "UPDATE jobs SET status = $1, attempts = attempts + $2 WHERE id = (SELECT id FROM "
            "jobs WHERE status = $3 LIMIT $4 FOR UPDATE SKIP LOCKED)",
            ("claim_without_lease",),
            None,
        ),
        # deletes
        (
            "DELETE FROM jobs WHERE status = $1 AND reserved_at < now() - $2",
            ("delete_processing",),
            None,
        ),
        ("DELETE FROM jobs WHERE id = $1", ("delete_processing",), None),
        ("DELETE FROM public.jobs", ("delete_processing",), None),
        # the statistics write 'done' as $1: which status it deletes cannot be told
        (
            "DELETE FROM jobs WHERE status = $1 AND finished_at < now() - $2",
            ("delete_status_unknown",),
            None,
        ),
        ("DELETE FROM jobs WHERE status = $1 AND id = $2", ("delete_status_unknown",), None),
        ("DELETE FROM jobs WHERE status = ANY($1)", ("delete_status_unknown",), None),
        # ... a constant can (unit strings, or a statement the statistics have not normalized)
        ("DELETE FROM jobs WHERE status = 'done' AND finished_at < now() - $1", (), None),
        ("DELETE FROM jobs WHERE status IN ('done', 'failed')", (), None),
        ("DELETE FROM jobs WHERE status <> 'processing'", (), None),
        ("DELETE FROM jobs WHERE status = 'processing' AND id = $1", ("delete_processing",), None),
        ("DELETE FROM jobs WHERE status = 'done' OR id = $1", ("delete_processing",), None),
        ("TRUNCATE jobs", ("delete_processing",), None),
        ("TRUNCATE other", (), None),
        # writes in data-modifying CTEs, under another statement
        (
            "WITH moved AS (DELETE FROM jobs WHERE id = $1 RETURNING *) "
            "INSERT INTO jobs_archive SELECT * FROM moved",
            ("delete_processing",),
            None,
        ),
        (
            "WITH done AS (UPDATE jobs SET status = $1 WHERE id = $2 RETURNING id) "
            "SELECT count(*) FROM done",
            ("unfenced_update",),
            None,
        ),
        # not the jobs table, or no write
        ("UPDATE other.jobs SET status = $1", (), None),
        ("UPDATE jobs_archive SET status = $1", (), None),
        ("SELECT * FROM jobs WHERE status = $1", (), None),
        ("INSERT INTO jobs (payload) VALUES ($1)", (), None),
        ("UPDATE jobs SET payload = $1 WHERE id = $2", (), None),
        ("not sql at all", (), None),
        # the fence is a value the caller gives: the row's own column is always equal
        (
            "UPDATE jobs SET status = $1 WHERE id = $2 AND attempt_token = attempt_token",
            ("unfenced_update",),
            None,
        ),
        (
            "UPDATE jobs SET status = $1 WHERE id = $2 AND attempt_token = jobs.attempt_token",
            ("unfenced_update",),
            None,
        ),
        (
            "UPDATE jobs j SET status = $1 FROM jobs j2 WHERE j.id = j2.id "
            "AND j.attempt_token = j2.attempt_token AND j.id = $2",
            ("unfenced_update",),
            None,
        ),
        ("UPDATE jobs SET status = $1 WHERE attempt_token = NULL", ("unfenced_update",), None),
        (
            "UPDATE jobs SET status = $1 WHERE id = $2 AND attempt_token = '0a4b'::uuid",
            (),
            "completion",
        ),
        # the operator is the system's =, never one named so in another schema
        (
            "UPDATE jobs SET status = $1 WHERE id = $2 AND attempt_token OPERATOR(app.=) $3",
            ("unfenced_update",),
            None,
        ),
        (
            "UPDATE jobs SET status = $1 WHERE id = $2 AND attempt_token OPERATOR(pg_catalog.=) $3",
            (),
            "completion",
        ),
        # the table in any spelling
        ('UPDATE U&"\\006Aobs" SET status = $1 WHERE id = $2', ("unfenced_update",), None),
        ('UPDATE "jobs" SET status = $1 WHERE id = $2', ("unfenced_update",), None),
        ("UPDATE JOBS SET status = $1 WHERE id = $2", ("unfenced_update",), None),
        ("UPDATE public.jobs SET status = $1 WHERE id = $2", ("unfenced_update",), None),
        ('UPDATE "JOBS" SET status = $1 WHERE id = $2', (), None),
        # writes in other clothes: upserts, MERGE, EXPLAIN ANALYZE, PREPARE
        (
            "INSERT INTO jobs (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET status = $2",
            ("unfenced_update",),
            None,
        ),
        ("INSERT INTO jobs (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", (), None),
        (
            "MERGE INTO jobs j USING (SELECT $1 AS id) s ON j.id = s.id "
            "WHEN MATCHED THEN UPDATE SET status = $2",
            ("unfenced_update",),
            None,
        ),
        (
            "MERGE INTO jobs j USING (SELECT $1 AS id) s ON j.id = s.id "
            "AND j.attempt_token = $2 WHEN MATCHED THEN UPDATE SET status = $3",
            (),
            None,
        ),
        (
            "MERGE INTO jobs j USING (SELECT $1 AS id) s ON j.id = s.id WHEN MATCHED THEN DELETE",
            ("delete_processing",),
            None,
        ),
        ("EXPLAIN ANALYZE UPDATE jobs SET status = $1 WHERE id = $2", ("unfenced_update",), None),
        ("PREPARE p AS UPDATE jobs SET status = $1 WHERE id = $2", ("unfenced_update",), None),
        # EXPLAIN without ANALYZE plans the write, never runs it
        ("EXPLAIN UPDATE jobs SET status = $1 WHERE id = $2", (), None),
        ("EXPLAIN (ANALYZE off) DELETE FROM jobs WHERE id = $1", (), None),
        ("EXPLAIN (ANALYZE, VERBOSE) DELETE FROM jobs WHERE id = $1", ("delete_processing",), None),
        # a sweeper by age stays one when it fences on the token its CTE read
        (
            "WITH old AS (SELECT id, attempt_token FROM jobs WHERE status = $1 AND "
            "heartbeat_at < now() - $2 FOR UPDATE SKIP LOCKED) UPDATE jobs j SET status = $3 "
            "FROM old WHERE j.id = old.id AND j.attempt_token = old.attempt_token",
            ("sweeper_by_age",),
            None,
        ),
    ],
)
def test_judge(statement, kinds, fenced):
    verdict = judge.judge(statement, JOBS)
    assert verdict.kinds == kinds
    assert verdict.fenced == fenced


def test_the_tables_own_names():
    assert judge.judge(
        "UPDATE background_tasks SET state = $1, locked_by = $2, locked_at = now() WHERE id = $3",
        RAILS,
    ).kinds == ("claim_without_skip_locked", "claim_without_lease")
    assert judge.judge(
        "UPDATE background_tasks SET state = $1 WHERE state = $2 AND locked_at < now() - $3",
        RAILS,
    ).kinds == ("sweeper_by_age",)
    # the design's names mean nothing on a table that maps them
    assert judge.judge("UPDATE background_tasks SET payload = $1 WHERE id = $2", RAILS).kinds == ()


def test_findings_leave_out_own_statements_and_count_rejections():
    own = {judge.fingerprint("UPDATE jobs SET status = 'x' WHERE id = 5")}
    rows = [
        {
            "queryid": 1,
            "query": "UPDATE jobs SET status = $1 WHERE id = $2",
            "role": "app",
            "calls": 10,
            "rows": 10,
        },
        {
            "queryid": 2,
            "query": "UPDATE jobs SET reserved_at = $1 WHERE id = $2",
            "role": "app",
            "calls": 3,
            "rows": 3,
        },
        {
            "queryid": 3,
            "query": "UPDATE jobs SET heartbeat_at = now() WHERE id = $1 AND attempt_token = $2",
            "role": "worker",
            "calls": 100,
            "rows": 93,
        },
        {
            "queryid": 4,
            "query": "UPDATE jobs SET status = $1 WHERE id = $2 AND attempt_token = $3",
            "role": "worker",
            "calls": 50,
            "rows": 49,
        },
    ]
    found, rejected, judged = doctor.findings(rows, JOBS, {p for p in own if p})
    assert [f["queryid"] for f in found] == [2, 3, 4]
    assert found[0]["kind"] == "unfenced_update" and found[0]["role"] == "app"
    assert [(f["kind"], f["rejected"]) for f in found[1:]] == [("heartbeat", 7), ("completion", 1)]
    assert rejected == {"heartbeat": 7, "completion": 1}
    assert judged == 4


@pytest.mark.parametrize(
    "statement, why",
    [
        # SYSTEM_USER is reserved since PostgreSQL 16: a 15 server runs what the parser refuses
        ("UPDATE jobs AS system_user SET status = $1 WHERE id = $2", "grammar"),
        ("UPDATE jobs SET status = $1 WHERE id = " + " + ".join(["$2"] * 500), "nested"),
        ("this is not SQL, but UPDATE is in it", "grammar"),
    ],
)
def test_what_does_not_parse_is_a_finding(statement, why):
    verdict = judge.judge(statement, JOBS)
    assert verdict.writes and verdict.kinds == ("unparsed",) and verdict.fenced is None
    assert why in (verdict.why or "")


def test_a_statement_cut_is_a_finding_whatever_its_start():
    verdict = judge.judge("SELECT 1 /* ", JOBS, chars=20_000_000, limit=12)
    assert verdict.kinds == ("unparsed",)
    assert verdict.why == "cut: 20000000 characters, longer than the 12 doctor reads"


def test_parentheses_nest_no_tree():
    deep = "UPDATE jobs SET status = $1 WHERE id = " + "(" * 2000 + "$2" + ")" * 2000
    assert judge.judge(deep, JOBS).kinds == ("unfenced_update",)
    ands = "UPDATE jobs SET status = $1 WHERE " + "(id = $2 AND " * 300 + "true" + ")" * 300
    assert judge.judge(ands + " AND attempt_token = $3", JOBS).fenced == "completion"


def test_the_catalogs_relations_are_the_table():
    table = judge.Table("jobs", "public", {}, related=frozenset({("app", "jobs_view")}))
    unfenced = "UPDATE {} SET status = $1 WHERE id = $2"
    assert judge.judge(unfenced.format("app.jobs_view"), table).kinds == ("unfenced_update",)
    assert judge.judge(unfenced.format("jobs_view"), table).kinds == ("unfenced_update",)
    assert judge.judge(unfenced.format("other.jobs_view"), table).kinds == ()
    assert judge.judge(unfenced.format("jobs_view"), JOBS).kinds == ()


def test_the_tables_processing_status():
    table = judge.Table("jobs", "public", {}, processing="running")
    assert judge.judge("DELETE FROM jobs WHERE status = 'running'", table).kinds == (
        "delete_processing",
    )
    assert judge.judge("DELETE FROM jobs WHERE status = 'processing'", table).kinds == ()


def test_findings_keep_unparsed_and_cut_statements():
    rows = [
        {
            "queryid": 1,
            "query": "UPDATE jobs AS system_user SET status = $1",
            "calls": 1,
            "rows": 1,
            "role": "app",
        },
        {
            "queryid": 2,
            "query": "UPDATE jobs SET status = $1 /* " + "x" * 5000,
            "calls": 1,
            "rows": 1,
            "role": "app",
            "query_chars": 20_000_000,
        },
    ]
    found, _, judged = doctor.findings(rows, JOBS, set())
    assert [(f["queryid"], f["kind"]) for f in found] == [(1, "unparsed"), (2, "unparsed")]
    assert "syntax error" in found[0]["parse_error"] and "could not parse" in found[0]["wrong"]
    assert len(found[1]["statement"]) == doctor.STATEMENT_KEPT
    assert found[1]["statement_chars"] == 20_000_000 and "cut: 20000000" in found[1]["why"]
    assert judged == 2


def test_only_a_fenced_statement_counts_rejections():
    rows = [
        {
            "queryid": 1,
            "role": "app",
            "calls": 10,
            "rows": 0,
            "query": "UPDATE jobs SET status = $1 WHERE id = $2 "
            "AND attempt_token = jobs.attempt_token",
        },
    ]
    found, rejected, _ = doctor.findings(rows, JOBS, set())
    assert rejected == {"heartbeat": 0, "completion": 0}
    assert [f["kind"] for f in found] == ["unfenced_update"]


def test_without_pglast_doctor_says_how_to_install_it(monkeypatch, capsys):
    from jobctl.cli import main as cli

    monkeypatch.setitem(sys.modules, "pglast", None)  # as if the doctor extra were missing
    assert cli.main(["--dsn", "host=/nonexistent", "doctor"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "jobctl: error: jobctl doctor needs pglast (PostgreSQL's parser): "
        "pip install 'jobctl[doctor]'"
    )


def test_the_cli_does_not_import_pglast():
    code = (
        "import sys, jobctl.cli.main; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pglast'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_functions_variables_are_values_the_rows_columns_are_not():
    """pg_stat_statements.track = 'all' shows a PL/pgSQL function's statements as written:
    a bare name that is no column of the table is its variable, as good as a parameter."""
    columns = frozenset({"id", "status", "attempt_token", "reserved_by", "lease_expires_at"})
    table = judge.Table("jobs", "public", {}, every_column=columns)
    fenced = "UPDATE jobs SET status = $1 WHERE id = p_id AND attempt_token = p_token"
    assert judge.judge(fenced, table).fenced == "completion"
    assert judge.judge(fenced, JOBS).kinds == ("unfenced_update",)  # columns unknown: no
    for value in ("attempt_token", "reserved_by", "jobs.attempt_token"):
        own = f"UPDATE jobs SET status = $1 WHERE id = p_id AND attempt_token = {value}"
        assert judge.judge(own, table).kinds == ("unfenced_update",), value
    # with another relation in FROM, a bare name may be its column: no value
    joined = (
        "UPDATE jobs SET status = $1 FROM other WHERE jobs.id = other.id "
        "AND attempt_token = p_token"
    )
    assert judge.judge(joined, table).kinds == ("unfenced_update",)


PAUSABLE = judge.Table("jobs", "public", {}, pauses=True)
PAUSED_CLAIM = DESIGN_CLAIM.replace(
    "available_at <= now() ",
    "available_at <= now() AND (NOT EXISTS (SELECT FROM jobctl.pauses p "
    "WHERE p.job_table = $8) OR NOT EXISTS (SELECT FROM jobctl.pauses p "
    "WHERE p.job_table = $9 AND p.dimension = $10 AND p.value = j.kind::text)) ",
)


def test_a_claim_that_does_not_read_the_pauses():
    """Where a kind can be paused, a claim must read jobctl.pauses (schema-qualified: a table
    named pauses elsewhere is not it); where none can, the design's claim is fine."""
    assert judge.judge(DESIGN_CLAIM, JOBS).kinds == ()
    assert judge.judge(DESIGN_CLAIM, PAUSABLE).kinds == ("claim_ignores_pauses",)
    assert judge.judge(PAUSED_CLAIM, PAUSABLE).kinds == ()
    elsewhere = PAUSED_CLAIM.replace("jobctl.pauses", "public.pauses")
    assert judge.judge(elsewhere, PAUSABLE).kinds == ("claim_ignores_pauses",)
    # lease.Worker's claim: the pauses given as a parameter, with the system's &&
    given = DESIGN_CLAIM.replace(
        "available_at <= now() ",
        "available_at <= now() AND NOT (ARRAY['kind:' || j.kind, 'queue:' || j.queue] "
        "OPERATOR(pg_catalog.&&) $8::text[]) ",
    )
    assert judge.judge(given, PAUSABLE).kinds == ()
    assert judge.judge(given.replace("OPERATOR(pg_catalog.&&)", "&&"), PAUSABLE).kinds == ()
    spoofed = given.replace("OPERATOR(pg_catalog.&&)", "OPERATOR(app.&&)")
    assert judge.judge(spoofed, PAUSABLE).kinds == ("claim_ignores_pauses",)
    # not a claim: a heartbeat needs no pause check
    beat = (
        "UPDATE jobs SET heartbeat_at = now(), lease_expires_at = now() + $1::interval "
        "WHERE id = $2 AND status = $3 AND attempt_token = $4"
    )
    assert judge.judge(beat, PAUSABLE).kinds == ()


COMPLETE = "UPDATE jobs SET status = $1, finished_at = now() WHERE id = $2 AND {fence}"


@pytest.mark.parametrize(
    "fence, kind, shape",
    [
        # 1. a domain over uuid with its own = (or any other schema's type): no fence
        (
            "attempt_token::app.tok = $3::app.tok",
            "fence_cast",
            "a cast to app.tok on the fence",
        ),
        ("attempt_token = $3::app.tok", "fence_cast", "a cast to app.tok on the fence"),
        ("attempt_token::tok = $3", "fence_cast", "a cast to tok on the fence"),
        (
            "attempt_token OPERATOR(app.=) $3::uuid",
            "unfenced_update",
            "compared with OPERATOR(app.=), not pg_catalog's =",
        ),
        # 3. a cast that truncates, through text, or any function of the token
        (
            "attempt_token::text::varchar(1) = $3::varchar(1)",
            "fence_cast",
            "a cast to text, varchar(1) on the fence",
        ),
        ("attempt_token::text = $3", "fence_cast", "a cast to text on the fence"),
        ("attempt_token::char(8) = $3", "fence_cast", "a cast to bpchar(8) on the fence"),
        (
            "left(attempt_token::text, 1) = $3",
            "fence_cast",
            "the function left() on the token",
        ),
        (
            "attempt_token::uuid[] = $3",
            "fence_cast",
            "a cast to uuid on the fence",
        ),
        ("attempt_token = lower($3)", "unfenced_update", "compared with an expression"),
    ],
)
def test_a_fence_through_a_cast_a_function_or_another_operator(fence, kind, shape):
    verdict = judge.judge(COMPLETE.format(fence=fence), JOBS)
    assert verdict.kinds == (kind,) and verdict.fenced is None
    assert shape in (verdict.why or ""), verdict.why


@pytest.mark.parametrize(
    "fence",
    [
        "attempt_token = $3",
        "attempt_token = $3::uuid",
        "attempt_token::uuid = $3::pg_catalog.uuid",
        "attempt_token OPERATOR(pg_catalog.=) $3::pg_catalog.uuid",
        "jobs.attempt_token = $3",
    ],
)
def test_the_token_cast_to_its_own_type_is_still_a_fence(fence):
    verdict = judge.judge(COMPLETE.format(fence=fence), JOBS)
    assert verdict.kinds == () and verdict.fenced == "completion"


SELF_THROUGH_CTE = (
    "WITH t AS (SELECT id, attempt_token FROM jobs WHERE id = $1) "
    "UPDATE jobs SET status = $2, reserved_by = $3, attempt_token = $4, lease_expires_at = $5 "
    "FROM t WHERE jobs.id = t.id AND jobs.attempt_token = t.attempt_token"
)


def test_the_rows_own_token_through_a_cte_is_no_fence():
    """2. The token must be compared with a value the caller gives; the row's own, read back
    through a CTE, is always equal. Only the design's reclaim (rows locked FOR UPDATE and
    chosen by their lease) may fence on the token it read."""
    verdict = judge.judge(SELF_THROUGH_CTE, JOBS)
    assert verdict.kinds == ("hand_requeue",)
    assert "the row's own attempt_token, read back through t, compared with itself" in (
        verdict.why or ""
    )
    done = SELF_THROUGH_CTE.replace("reserved_by = $3, attempt_token = $4, ", "")
    done = done.replace("lease_expires_at = $5", "finished_at = now()")
    assert judge.judge(done, JOBS).kinds == ("unfenced_update",)
    # locked, but not chosen by the lease: still no fence
    locked = done.replace("WHERE id = $1)", "WHERE id = $1 FOR UPDATE)")
    assert judge.judge(locked, JOBS).kinds == ("unfenced_update",)
    # the token a CTE or a subquery selects as a parameter is a fence
    given = done.replace(
        "SELECT id, attempt_token FROM jobs WHERE id = $1",
        "SELECT $1 AS id, $6::uuid AS attempt_token",
    )
    assert judge.judge(given, JOBS).kinds == ()
    values = (
        "WITH t(id, token) AS (VALUES ($1, $2::uuid)) UPDATE jobs SET status = $3 "
        "FROM t WHERE jobs.id = t.id AND jobs.attempt_token = t.token"
    )
    assert judge.judge(values, JOBS).kinds == ()
    subquery = (
        "UPDATE jobs SET status = $1 FROM (SELECT $2::bigint AS id, $3::uuid AS token) p "
        "WHERE jobs.id = p.id AND jobs.attempt_token = p.token"
    )
    assert judge.judge(subquery, JOBS).kinds == ()
    cast = subquery.replace("$3::uuid", "$3::varchar(1)")
    assert judge.judge(cast, JOBS).kinds == ("fence_cast",)


@pytest.mark.parametrize(
    "reclaim",
    [
        # the lease design's reclaim (the design's card)
        "WITH expired AS (SELECT id, attempt_token FROM jobs WHERE status = $1 "
        "AND lease_expires_at < now() ORDER BY lease_expires_at LIMIT $2 "
        "FOR UPDATE SKIP LOCKED) UPDATE jobs j SET status = $3, reserved_by = $4, "
        "reserved_at = $5, heartbeat_at = $6, lease_expires_at = $7, attempt_token = $8 "
        "FROM expired WHERE j.id = expired.id AND j.attempt_token = expired.attempt_token",
        # a FOR NO KEY UPDATE lock, the token aliased
        "WITH e AS (SELECT id, attempt_token AS tok FROM jobs WHERE lease_expires_at < now() "
        "FOR NO KEY UPDATE SKIP LOCKED) UPDATE jobs SET status = $1, attempt_token = $2 "
        "FROM e WHERE jobs.id = e.id AND jobs.attempt_token = e.tok",
    ],
)
def test_the_designs_reclaim_fences_on_the_token_it_read(reclaim):
    assert judge.judge(reclaim, JOBS).kinds == ()


def test_a_view_is_judged_by_the_tables_columns_it_shows():
    """4. Through a view, each column is the table's column it shows: a view whose
    attempt_token is the table's reserved_by fences nothing."""
    shows = {"id": "id", "status": "status", "attempt_token": "reserved_by"}
    table = judge.Table(
        "jobs",
        "public",
        {},
        related=frozenset({("app", "jv")}),
        views={("app", "jv"): shows},
    )
    statement = "UPDATE app.jv SET status = $1 WHERE id = $2 AND attempt_token = $3"
    verdict = judge.judge(statement, table)
    assert verdict.kinds == ("unfenced_update",)
    assert "through the view app.jv, whose attempt_token is the table's reserved_by" in (
        verdict.why or ""
    )
    # the same view showing the real token (renamed) fences on it
    honest = {"id": "id", "status": "status", "token": "attempt_token"}
    table = dataclasses.replace(table, views={("app", "jv"): honest})
    fenced = statement.replace("attempt_token = $3", "token = $3")
    assert judge.judge(fenced, table).fenced == "completion"
    assert judge.judge(statement, table).kinds == ("unfenced_update",)
    # an expression shown as the token is none
    computed = {"id": "id", "status": "status", "attempt_token": None}
    table = dataclasses.replace(table, views={("app", "jv"): computed})
    verdict = judge.judge(statement, table)
    assert verdict.kinds == ("unfenced_update",)
    assert "through the view app.jv, whose attempt_token is an expression" in (verdict.why or "")


def test_a_triggers_or_rules_new_row_is_a_value():
    """A rule's or trigger's UPDATE compares with NEW's fields: the values of the statement
    that fired it (a row of its own named new is not)."""
    fenced = "UPDATE jobs SET status = $1 WHERE id = new.job_id AND attempt_token = new.token"
    assert judge.judge(fenced, JOBS).fenced == "completion"
    unfenced = "UPDATE jobs SET status = $1 WHERE id = new.job_id"
    assert judge.judge(unfenced, JOBS).kinds == ("unfenced_update",)
    aliased = (
        "UPDATE jobs AS new SET status = $1 WHERE id = $2 AND attempt_token = new.attempt_token"
    )
    assert judge.judge(aliased, JOBS).kinds == ("unfenced_update",)


def test_an_unqualified_equal_where_another_schema_compares_uuids():
    """Where a schema other than pg_catalog defines = between uuids, a search path that
    lists it first makes an unqualified = its: only OPERATOR(pg_catalog.=) is a fence."""
    shadowed = judge.Table("jobs", "public", {}, shadowed=("app",))
    plain = COMPLETE.format(fence="attempt_token = $3")
    verdict = judge.judge(plain, shadowed)
    assert verdict.kinds == ("unfenced_update",)
    assert "an unqualified =, which may be app.=" in (verdict.why or "")
    qualified = COMPLETE.format(fence="attempt_token OPERATOR(pg_catalog.=) $3")
    assert judge.judge(qualified, shadowed).fenced == "completion"


DELAYED_JOBS = judge.Table(
    "delayed_jobs",
    "public",
    {"reserved_by": "locked_by", "reserved_at": "locked_at", "available_at": "run_at"},
)
DELAYED_JOB_CLAIM = (
    "UPDATE delayed_jobs SET locked_at = $1, locked_by = $2 WHERE id IN (SELECT id FROM "
    "delayed_jobs WHERE ((run_at <= $3 AND (locked_at IS NULL OR locked_at < $4) OR "
    "locked_by = $5) AND failed_at IS NULL) ORDER BY priority ASC, run_at ASC LIMIT $6 "
    "FOR UPDATE) RETURNING *"
)


def test_a_claim_by_lock_age_is_a_claim_that_fails_the_timeout_check():
    """Delayed::Job's claim sets its lock to parameters (no now(), no attempts + 1): it is
    known as a claim by the unheld rows it picks (locked_at IS NULL), and its locked_at < $4
    (max_run_time) takes jobs back by age."""
    verdict = judge.judge(DELAYED_JOB_CLAIM, DELAYED_JOBS)
    assert verdict.kinds == ("claim_by_age", "claim_without_skip_locked", "claim_without_lease")
    assert verdict.why_of("claim_by_age") == "it tests locked_at < $4"
    said = verdict.why_of("claim_without_skip_locked") or ""
    assert said.startswith("it locks FOR UPDATE without SKIP LOCKED")
    assert verdict.why_of("claim_without_lease") is None


@pytest.mark.parametrize(
    "statement, kinds, why",
    [
        # the gem's unlock and its failure write give back, never claim
        (
            "UPDATE delayed_jobs SET locked_by = $1, locked_at = $2 WHERE locked_by = $3",
            ("unfenced_update",),
            None,
        ),
        # a sweeper that gives back jobs taken long ago and never heartbeaten: it sets the
        # claim columns but picks by a NULL it does not set, so it is no claim
        (
            "UPDATE jobs SET status=$1, reserved_by=$2, reserved_at=$3 WHERE status=$4 AND "
            "heartbeat_at IS NULL AND reserved_at < now() - $5::interval",
            ("sweeper_by_age",),
            "it tests reserved_at < (an expression)",
        ),
        # a stamped claim by updated_at age, with SKIP LOCKED and the lease: only the age
        (
            "UPDATE jobs SET status = $1, reserved_at = now(), attempt_token = $2, "
            "lease_expires_at = now() + $3 WHERE id = (SELECT id FROM jobs WHERE status = $4 "
            "OR updated_at < now() - $5 LIMIT $6 FOR UPDATE SKIP LOCKED)",
            ("claim_by_age",),
            "it tests updated_at < (an expression)",
        ),
        # the age as a difference, in a CTE
        (
            "WITH t AS (SELECT id FROM jobs WHERE reserved_by IS NULL OR now() - reserved_at "
            "> $1 FOR NO KEY UPDATE SKIP LOCKED LIMIT $2) UPDATE jobs SET reserved_by = $3, "
            "reserved_at = $4, attempt_token = $5, lease_expires_at = $6 FROM t "
            "WHERE jobs.id = t.id",
            ("claim_by_age",),
            "it tests (an expression) > $1",
        ),
        # a claim that takes back expired leases tests the lease: no claim by age
        (
            "UPDATE jobs SET reserved_by = $1, reserved_at = $2, attempt_token = $3, "
            "lease_expires_at = $4 WHERE id = (SELECT id FROM jobs WHERE reserved_at IS NULL "
            "OR (lease_expires_at < now() AND reserved_at < now() - $5) LIMIT $6 "
            "FOR UPDATE SKIP LOCKED)",
            (),
            None,
        ),
        # FOR SHARE SKIP LOCKED keeps no other claim out; NOWAIT fails instead of waiting
        (
            "UPDATE jobs SET reserved_by = $1, reserved_at = now(), attempt_token = $2, "
            "lease_expires_at = $3 WHERE id = (SELECT id FROM jobs WHERE status = $4 "
            "LIMIT $5 FOR SHARE SKIP LOCKED)",
            ("claim_without_skip_locked",),
            "it locks FOR SHARE SKIP LOCKED, a lock too weak to keep other claims out",
        ),
        (
            "UPDATE jobs SET reserved_by = $1, reserved_at = now(), attempt_token = $2, "
            "lease_expires_at = $3 WHERE id = (SELECT id FROM jobs WHERE status = $4 "
            "LIMIT $5 FOR UPDATE NOWAIT)",
            ("claim_without_skip_locked",),
            "it locks FOR UPDATE without SKIP LOCKED: a worker that meets a row another holds "
            "gets an error (NOWAIT), and every worker picks the same first rows",
        ),
    ],
)
def test_claims_by_age_and_how_they_lock(statement, kinds, why):
    verdict = judge.judge(statement, JOBS if "delayed" not in statement else DELAYED_JOBS)
    assert verdict.kinds == kinds
    assert (verdict.why_of(kinds[0]) if kinds else None) == why


# a table of OCA queue_job's semantics (Odoo 16) as it would be mapped: its times, and its
# requeue of dead jobs
QUEUE_JOB = judge.Table(
    "job_queue",
    "public",
    {
        "status": "state",
        "attempts": "retry",
        "max_attempts": "max_retries",
        "reserved_by": "worker_pid",
        "reserved_at": "date_started",
        "available_at": "eta",
        "finished_at": "date_done",
        "updated_at": "write_date",
    },
    processing="started",
    times=frozenset({"date_created", "date_enqueued", "date_started", "date_done", "eta"}),
)


@pytest.mark.parametrize(
    "statement, table, kinds, why",
    [
        # the generic sweeper, its age a parameter
        (
            "UPDATE jobs SET status = $1, reserved_by = NULL WHERE status = $2 "
            "AND reserved_at < now() - $3",
            JOBS,
            ("sweeper_by_age",),
            "it tests reserved_at < (an expression)",
        ),
        # OCA's requeue by the age of a time the mapping does not name (date_enqueued)
        (
            "UPDATE job_queue SET state = $1 WHERE state IN ($2, $3) "
            "AND date_enqueued < now() - $4::interval",
            QUEUE_JOB,
            ("sweeper_by_age",),
            "it tests date_enqueued < (an expression)",
        ),
        # ... counting an attempt as it sets the jobs back: a sweeper, not a claim
        (
            "UPDATE job_queue SET state = $1, retry = (CASE WHEN max_retries IS NULL OR "
            "retry < max_retries THEN retry + $2 ELSE retry END) WHERE state IN ($3, $4) "
            "AND date_started < (now() AT TIME ZONE $5 - INTERVAL $6)",
            QUEUE_JOB,
            ("sweeper_by_age",),
            "it tests date_started < (an expression)",
        ),
        # moving jobs by their ready time (a stager) or their finish time (an archiver) is
        # no sweeper by age (an unfenced status write, as any)
        (
            "UPDATE job_queue SET state = $1 WHERE state = $2 AND eta <= now()",
            QUEUE_JOB,
            ("unfenced_update",),
            None,
        ),
        (
            "UPDATE job_queue SET state = $1 WHERE state = $2 AND date_done < now() - $3",
            QUEUE_JOB,
            ("unfenced_update",),
            None,
        ),
        # a claim that counts the attempt and locks SKIP LOCKED stays a claim
        (
            "UPDATE job_queue SET state = $1, retry = retry + $2 WHERE id = (SELECT id FROM "
            "job_queue WHERE state = $3 ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)",
            QUEUE_JOB,
            ("claim_without_lease",),
            None,
        ),
    ],
)
def test_sweepers_by_any_age_are_found(statement, table, kinds, why):
    verdict = judge.judge(statement, table)
    assert verdict.kinds == kinds
    assert (verdict.why_of(kinds[0]) if kinds else None) == why
