"""A fleet for the tests across targets: three databases of three shapes, one unreachable target,
and the config file that names them (the format in docs: [defaults], [targets.NAME]).

    with fleet.staged(server_dsn, template, tmp_path) as f:
        for name, value in f.env.items():
            monkeypatch.setenv(name, value)  # the dsn_env target's DSN
        monkeypatch.setenv("JOBCTL_CONFIG", str(f.config))
        ... jobctl --all-targets stuck: f.stuck[target] rows for each reachable one ...

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


@contextlib.contextmanager
def staged(server_dsn: str, template: str, tmp_path: Path) -> Iterator[Fleet]:
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
        dsns = {
            **made,
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
        yield Fleet(
            config=config,
            dsns=dsns,
            tables=tables,
            stuck={name: len(found) for name, found in ids.items()},
            ids=ids,
            env={EMAILS_ENV: dsns["emails"]},
        )
