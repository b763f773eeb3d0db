"""A fleet for the tests across targets: three databases of three shapes, one unreachable target,
and the config file that names them (the format in docs: [defaults], [targets.NAME]).

    with fleet.staged(server_dsn, template, tmp_path) as f:
        for name, value in f.env.items():
            monkeypatch.setenv(name, value)  # the dsn_env target's DSN
        monkeypatch.setenv("JOBCTL_CONFIG", str(f.config))
        ... jobctl --all-targets stuck: f.stuck[target] rows for each reachable one ...

Staging (two ``schema apply`` runs, the claims) is done once and shared: ``databases``
stages the three, ``configured`` writes a config file naming them (a fresh unreachable
port each time), ``copied`` makes a test its own copy of staged databases (each made with
the staged one as its template: the same rows and ids) for a test that writes, and
``fingerprint`` tells whether a test that shares them left them as they were.

* ``orders``: the reference jobs table (cloned from the template): 3 stuck (one manual),
  2 live leases, 4 queued. ``dsn`` in the config.
* ``billing``: its own names (tests/shapes.py OWN_NAMES_PARKED: ``tasks``, state
  pending/running/...): 2 stuck, 1 live, 2 pending. ``dsn`` and ``table = "tasks"``.
* ``emails``: text ids in schema ``work`` (TEXT_VARCHAR_NAIVE: ``work.jobs``): nothing stuck,
  2 live, 3 queued. ``dsn_env`` (the variable and its value in ``Fleet.env``: set it) and
  ``table = "work.jobs"``, ``lock_timeout = "1s"``.
* ``down``: a DSN on 127.0.0.1 at a port nothing listens on (refused at once).

Stuck jobs are claimed through the worker API (jobctl.lease) with an expired lease: status
processing in the table's own terms, an attempt token, lease_expires_at a minute ago.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from conftest import scratch_database
from shapes import OWN_NAMES_PARKED, TEXT_VARCHAR_NAIVE, Shape

from jobctl import db, lease
from jobctl.schema import apply as schema_apply
from jobctl.schema import steps as schema_steps

DOWN = "down"
EMAILS_ENV = "JOBCTL_FLEET_EMAILS_DSN"

# the reference table as a Shape, so that every database is staged alike
REFERENCE = Shape(
    name="the reference jobs table",
    table="jobs",
    ddl="",  # the template holds it, applied
    new_job="INSERT INTO jobs DEFAULT VALUES RETURNING id",
)


@dataclasses.dataclass(frozen=True)
class Fleet:
    config: Path  # the config file (mode 0600): give it as JOBCTL_CONFIG
    dsns: dict[str, str]  # target -> DSN, every target (``down`` too)
    tables: dict[str, str]  # target -> its table as --table takes it, every target
    stuck: dict[str, int]  # reachable target -> how many stuck jobs
    ids: dict[str, list[Any]]  # reachable target -> the stuck ids (int or str), oldest first
    env: dict[str, str]  # environment variables the caller must set (the dsn_env target's)
    down: str = DOWN  # the unreachable target

    @property
    def reachable(self) -> list[str]:
        return list(self.stuck)


def stage(dsn: str, s: Shape, *, stuck: int, live: int, queued: int, manual: int = 0) -> list:
    """``stuck`` jobs with an expired lease (the first ``manual`` of them manual), ``live``
    ones with a lease of an hour, ``queued`` waiting: claimed in that order, so each claim
    takes the jobs inserted just before it. The stuck ids."""
    with psycopg.connect(dsn, autocommit=True) as conn:

        def insert(n: int) -> list:
            return [conn.execute(s.new_job).fetchone()[0] for _ in range(n)]

        def claim(n: int, worker: str, lease_seconds: float) -> list:
            w = lease.Worker(conn, worker, table=s.table, lease_seconds=lease_seconds)
            claims = [w.claim() for _ in range(n)]
            assert all(claims), f"{s.table}: claimed {claims}"
            return [c.id for c in claims]

        ids = insert(stuck)
        for job in ids[:manual]:
            conn.execute(f"UPDATE {s.table} SET recovery_policy = 'manual' WHERE id = %s", (job,))
        assert sorted(map(str, claim(stuck, "dead", -60))) == sorted(map(str, ids))
        insert(live)
        claim(live, "alive", 3600)
        insert(queued)
    return ids


def applied(dsn: str, s: Shape) -> None:
    """The application's table, then ``jobctl schema apply`` with its mapping."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(s.ddl)
    settings = db.Settings(dsn=dsn)
    with db.connect(settings) as conn:
        schema_steps.apply(
            conn,
            settings,
            schema_apply.plan_apply(conn, s.table, create=False, mapping=s.mapping()),
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def toml(value: str) -> str:
    return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's


@dataclasses.dataclass(frozen=True)
class Staged:
    """The three staged databases: reachable target -> DSN, and the stuck ids of each."""

    dsns: dict[str, str]
    ids: dict[str, list[Any]]


@contextlib.contextmanager
def databases(server_dsn: str, template: str) -> Iterator[Staged]:
    """orders, billing and emails staged on the test server, dropped after."""
    with contextlib.ExitStack() as stack:
        made = {
            "orders": stack.enter_context(scratch_database(server_dsn, "jobctl_orders", template)),
            "billing": stack.enter_context(scratch_database(server_dsn, "jobctl_billing")),
            "emails": stack.enter_context(scratch_database(server_dsn, "jobctl_emails")),
        }
        applied(made["billing"], OWN_NAMES_PARKED)
        applied(made["emails"], TEXT_VARCHAR_NAIVE)
        ids = {
            "orders": stage(made["orders"], REFERENCE, stuck=3, live=2, queued=4, manual=1),
            "billing": stage(made["billing"], OWN_NAMES_PARKED, stuck=2, live=1, queued=2),
            "emails": stage(made["emails"], TEXT_VARCHAR_NAIVE, stuck=0, live=2, queued=3),
        }
        yield Staged(made, ids)


@contextlib.contextmanager
def copied(server_dsn: str, of: Staged) -> Iterator[Staged]:
    """A copy of staged databases, dropped after: each made with the staged one as its
    template (nothing may be connected to it meanwhile), so the same rows and ids."""
    with contextlib.ExitStack() as stack:
        made = {
            name: stack.enter_context(scratch_database(server_dsn, f"jobctl_{name}", dbname(dsn)))
            for name, dsn in of.dsns.items()
        }
        yield Staged(made, of.ids)


def dbname(dsn: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


def configured(databases: Staged, tmp_path: Path) -> Fleet:
    """The fleet of ``databases`` and a target nothing listens on, in a new config file."""
    dsns = {
        **databases.dsns,
        DOWN: f"host=127.0.0.1 port={free_port()} dbname=down user=postgres connect_timeout=2",
    }
    tables = {
        "orders": "jobs",
        "billing": OWN_NAMES_PARKED.table,
        "emails": TEXT_VARCHAR_NAIVE.table,
        DOWN: "jobs",
    }
    config = tmp_path / "jobctl.toml"
    text = f"""\
[defaults]
actor = "fleet-tests@ci"

[targets.orders]
dsn = {toml(dsns["orders"])}

[targets.billing]
dsn = {toml(dsns["billing"])}
table = {toml(tables["billing"])}

[targets.emails]
dsn_env = {toml(EMAILS_ENV)}
table = {toml(tables["emails"])}
lock_timeout = "1s"

[targets.{DOWN}]
dsn = {toml(dsns[DOWN])}
"""
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return Fleet(
        config=config,
        dsns=dsns,
        tables=tables,
        stuck={name: len(found) for name, found in databases.ids.items()},
        ids=databases.ids,
        env={EMAILS_ENV: dsns["emails"]},
    )


@contextlib.contextmanager
def staged(server_dsn: str, template: str, tmp_path: Path) -> Iterator[Fleet]:
    """The fleet staged anew, its config file in ``tmp_path``."""
    with databases(server_dsn, template) as made:
        yield configured(made, tmp_path)


def fingerprint(dsns: dict[str, str], server_dsn: str) -> dict[str, Any]:
    """What a test could change on the databases of ``dsns`` (name -> DSN): each table's
    columns and rows (with their xmin: a row updated to the same values shows), each
    sequence's value, and whether each database takes connections. The same before and
    after a test that only reads."""
    found: dict[str, Any] = {}
    with psycopg.connect(server_dsn) as admin:
        for name, dsn in dsns.items():
            allowed = admin.execute(
                "SELECT datallowconn FROM pg_database WHERE datname = %s", (dbname(dsn),)
            ).fetchone()
            found[f"{name} takes connections"] = allowed
    for name, dsn in dsns.items():
        if found[f"{name} takes connections"] != (True,):
            continue  # changed already, and no way in to read it
        with psycopg.connect(dsn) as conn:
            relations = conn.execute(
                "SELECT c.oid::regclass::text, c.relkind = 'S' FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.relkind IN ('r', 'p', 'S') AND n.nspname <> 'information_schema'"
                " AND n.nspname !~ '^pg_' ORDER BY 1"
            ).fetchall()
            for table, sequence in relations:
                if sequence:
                    found[f"{name} {table}"] = conn.execute(
                        f"SELECT last_value, is_called FROM {table}"
                    ).fetchone()
                    continue
                found[f"{name} {table} columns"] = conn.execute(
                    "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', '"
                    " ORDER BY attnum) FROM pg_attribute"
                    " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
                    (table,),
                ).fetchone()
                found[f"{name} {table} rows"] = conn.execute(
                    f"SELECT count(*), md5(coalesce(string_agg(t::text || ' ' || t.xmin::text,"
                    f" ',' ORDER BY t::text), '')) FROM {table} t"
                ).fetchone()
    return found
