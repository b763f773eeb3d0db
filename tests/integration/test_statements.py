"""jobctl schema statements: the lease design's worker statements rendered for the
table as mapped, run as a worker in another language runs them — PREPAREd and EXECUTEd with
text parameters, and sent as they are with $n parameters through libpq — on the reference
table and an application's own table, through claim -> heartbeat -> complete and claim -> fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import rows
from shapes import BACKGROUND_TASKS


def rendered(run, *args: str) -> dict[str, dict]:
    result = run(*args, "schema", "statements", "-o", "json")
    assert result.code == 0, result.err
    return {s["name"]: s for s in json.loads(result.out)}


def prepared(conn, statements) -> None:
    for name, s in statements.items():
        conn.execute(f"PREPARE {name} AS {s['sql']}")


def execute(conn, name: str, *params):
    """EXECUTE a prepared statement with its parameters as a client's text and numbers."""
    with psycopg.ClientCursor(conn, row_factory=rows.dict_row) as cur:
        placeholders = ", ".join(["%s"] * len(params))
        cur.execute(f"EXECUTE {name}({placeholders})", params)
        return cur.fetchall()


def libpq(conn, s, *params):
    """The statement sent as it is, with $n parameters in text (libpq's PQexecParams)."""
    result = conn.pgconn.exec_params(
        s["sql"].encode(), [None if p is None else str(p).encode() for p in params]
    )
    assert result.status in (1, 2), result.error_message  # COMMAND_OK, TUPLES_OK
    return (
        [result.get_value(0, c).decode() for c in range(result.nfields)] if result.ntuples else []
    )


def cycle(conn, statements, status, status_of) -> None:
    """claim -> heartbeat -> complete, a stale completion fenced out; claim -> fail."""
    token = str(uuid.uuid4())
    (claimed,) = execute(conn, "claim", "w-go-1", token, 30)
    assert str(claimed["attempt_token"]) == token and claimed["attempts"] == 1
    job = str(claimed["id"])
    assert status_of(job) == status["processing"]
    (beat,) = execute(conn, "heartbeat", job, "w-go-1", token, 30)
    assert beat["lease_expires_at"] > claimed["lease_expires_at"]
    assert execute(conn, "heartbeat", job, "w-go-1", str(uuid.uuid4()), 30) == []  # fenced
    assert execute(conn, "heartbeat", job, "someone-else", token, 30) == []
    assert execute(conn, "complete", job, token) != []
    assert status_of(job) == status["done"]
    assert execute(conn, "complete", job, token) == []  # a second completion: no row
    # ... and after a lost acknowledgement, completed says whose completion landed
    assert execute(conn, "completed", job, token) == [{"completed_by_it": True}]
    assert execute(conn, "completed", job, str(uuid.uuid4())) == [{"completed_by_it": False}]

    token = str(uuid.uuid4())
    (claimed,) = execute(conn, "claim", "w-go-1", token, 30)
    job = str(claimed["id"])
    (failed,) = execute(conn, "fail", job, token, "boom", 0)
    assert failed["status"] == status["queued"] and failed["retried"] is True
    assert status_of(job) == status["queued"]
    assert execute(conn, "fail", job, token, "again", 0) == []  # fenced: no longer held

    # the same statements as they are, $n parameters and all, through libpq
    token = str(uuid.uuid4())
    job, got, _, _ = libpq(conn, statements["claim"], "w-go-2", token, 0.5)
    assert got == token and status_of(job) == status["processing"]
    assert libpq(conn, statements["heartbeat"], job, "w-go-2", token, 30) != []
    assert libpq(conn, statements["complete"], job, str(uuid.uuid4())) == []
    assert libpq(conn, statements["complete"], job, token) == [job]
    assert status_of(job) == status["done"]


def status_reader(conn, table: str, column: str):
    query = psycopg.sql.SQL("SELECT {}::text AS s FROM {} WHERE id::text = %s").format(
        psycopg.sql.Identifier(column), psycopg.sql.Identifier(table)
    )
    return lambda job: conn.execute(query, (job,)).fetchone()["s"]


def test_reference_table(conn, run):
    statements = rendered(run)
    assert [s["params"] for s in statements.values()] == [
        ["worker", "token", "lease_seconds"],
        ["id", "worker", "token", "lease_seconds"],
        ["id", "token"],
        ["id", "token"],
        ["id", "token", "error", "retry_delay_seconds"],
    ]
    conn.execute("INSERT INTO jobs (recovery_policy) SELECT 'auto' FROM generate_series(1, 3)")
    prepared(conn, statements)
    names = {"queued": "queued", "processing": "processing", "done": "done"}
    cycle(conn, statements, names, status_reader(conn, "jobs", "status"))
    table = run("schema", "statements").out
    assert "-- name: claim" in table and "--   $3 lease_seconds:" in table
    assert "FOR UPDATE SKIP LOCKED" in table and "%%" not in table


def test_rails_style_table(empty_dsn, run):
    s = BACKGROUND_TASKS
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        conn.execute(s.ddl)
        for _ in range(3):
            conn.execute(s.new_job)
        applied = run(
            "--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=empty_dsn
        )
        assert applied.code == 0, applied.err
        statements = rendered(run, "--dsn", empty_dsn, "--table", s.table)
        claim = statements["claim"]["sql"]
        assert "\"state\" OPERATOR(pg_catalog.=) 'pending'" in claim and '"locked_by"' in claim
        assert '"run_at"' in claim and '"tries"' in claim
        assert "'errored'" in statements["fail"]["sql"]
        prepared(conn, statements)
        names = {"queued": "pending", "processing": "running", "done": "succeeded"}
        cycle(conn, statements, names, status_reader(conn, s.table, "state"))


@pytest.mark.parametrize("table", ["jobs"])
def test_the_statements_are_lease_workers(conn, run, table):
    """One home: the rendered SQL is the worker API's block for the table, its parameters
    renumbered (nothing else differs)."""
    import re

    from jobctl import db
    from jobctl.schema import statements as core
    from jobctl.sql import queries

    t = db.resolve_table(conn, table)
    for s in core.render(conn, t):
        block = queries.query(core.BLOCKS[s.name], **t.fragments).as_string(conn)
        words = re.sub(r"%\(\w+\)s(::[\w.]+)?", "P", block).replace("%%", "%")
        ours = re.sub(
            r"\(\$\d::pg_catalog\.float8 OPERATOR\(pg_catalog\.\*\) '1 second'::pg_catalog\."
            r"interval\)|\$\d(::[\w.]+)?",
            "P",
            s.sql,
        )
        assert ours == words


@pytest.mark.skipif(shutil.which("psql") is None, reason="needs psql")
def test_the_shell_worker_of_the_docs(empty_dsn, run, tmp_path):
    """docs/worker-api.md's sh + psql worker, run as it is: it claims, completes, and gives a
    failed job back for a retry, on an application's own table."""
    page = (Path(__file__).parents[2] / "docs" / "worker-api.md").read_text()
    script = page.split("<!-- worker.sh -->\n```sh\n")[1].split("```")[0]
    (tmp_path / "worker.sh").write_text(script)
    (tmp_path / "do-work").write_text('#!/bin/sh\n[ "$1" = 2 ] && exit 7\nexit 0\n')
    (tmp_path / "do-work").chmod(0o755)
    s = BACKGROUND_TASKS
    with psycopg.connect(empty_dsn, autocommit=True, row_factory=rows.dict_row) as conn:
        conn.execute(s.ddl)
        for _ in range(3):
            conn.execute(s.new_job)
        applied = run(
            "--table", s.table, "schema", "apply", "--yes", *s.mapping_args(), dsn=empty_dsn
        )
        assert applied.code == 0, applied.err
        info = conn.info
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "ONCE": "1",
            "JOBCTL_DSN": empty_dsn,
            "PGHOST": info.host,
            "PGPORT": str(info.port),
            "PGUSER": info.user,
            "PGDATABASE": info.dbname,
        }
        done = subprocess.run(
            ["sh", "worker.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        got = conn.execute(
            "SELECT id, state, tries, error_message FROM background_tasks ORDER BY id"
        ).fetchall()
    assert [(r["state"], r["tries"]) for r in got] == [
        ("succeeded", 1),
        ("pending", 1),
        ("succeeded", 1),
    ]
    assert got[1]["error_message"] == "do-work exited 7"
