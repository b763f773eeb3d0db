"""One command across several databases (``--target``, ``--all-targets``): three databases of
three shapes on the test server and one target nothing listens on (tests/fleet.py), staged
once for the module: the tests that only read share them (each test's end checks they are
as they were), a test that writes gets its own copy (``copied``). The database ``run``
exports as JOBCTL_DSN is the module's too, and checked likewise."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import fleet as staging
import prometheus
import psycopg
import pytest
from conftest import scratch_database
from helpers import wait_until
from shapes import OWN_NAMES_PARKED, TEXT_VARCHAR_NAIVE

from jobctl.render import rows

SHAPES = {"orders": staging.REFERENCE, "billing": OWN_NAMES_PARKED, "emails": TEXT_VARCHAR_NAIVE}


class Shared:
    """The fleet's databases staged once for the module's tests that only read them, and the
    database exported as JOBCTL_DSN, with their fingerprint; staged anew if a test left them
    changed."""

    def __init__(self, server_dsn: str, template: str) -> None:
        self.server_dsn, self.template = server_dsn, template
        self.stack = contextlib.ExitStack()
        self.stage()

    def stage(self) -> None:
        self.stack.close()
        self.made = self.stack.enter_context(staging.databases(self.server_dsn, self.template))
        self.default = self.stack.enter_context(
            scratch_database(self.server_dsn, "jobctl_t", self.template)
        )
        self.fingerprint = staging.fingerprint(self.dsns(), self.server_dsn)

    def dsns(self) -> dict[str, str]:
        return {**self.made.dsns, "JOBCTL_DSN's": self.default}

    def changed(self) -> bool:
        return staging.fingerprint(self.dsns(), self.server_dsn) != self.fingerprint


@pytest.fixture(scope="module")
def shared(server_dsn, template):
    made = Shared(server_dsn, template)
    with made.stack:
        yield made


def configured(made: staging.Staged, tmp_path, monkeypatch) -> staging.Fleet:
    """The fleet of ``made``, its config file as JOBCTL_CONFIG, the dsn_env target's variable
    set."""
    fleet = staging.configured(made, tmp_path)
    for name, value in fleet.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("JOBCTL_CONFIG", str(fleet.config))
    monkeypatch.delenv("JOBCTL_TARGET", raising=False)
    return fleet


@pytest.fixture
def dsn(shared):
    """The database `run` exports as JOBCTL_DSN, as an operator with a config file may have
    one: the module's, made from the template; a command across targets neither reads nor
    writes it (it is in the fingerprint each test's end checks)."""
    return shared.default


def unchanged(shared: Shared, what: str) -> None:
    if shared.changed():
        shared.stage()
        pytest.fail(f"this test changed {what} it shares with others")


@pytest.fixture
def staged(shared, tmp_path, monkeypatch):
    """The module's fleet, for a test that only reads it: after the test every database must
    be as it was (else the test fails, and the fleet is staged anew for the next)."""
    yield configured(shared.made, tmp_path, monkeypatch)
    unchanged(shared, "the fleet (give it `copied`) or JOBCTL_DSN's database")


@pytest.fixture
def copied(shared, server_dsn, tmp_path, monkeypatch):
    """A copy of the module's fleet for a test that writes: its own databases, made from the
    shared ones, dropped after it."""
    with staging.copied(server_dsn, shared.made) as made:
        yield configured(made, tmp_path, monkeypatch)
    unchanged(shared, "JOBCTL_DSN's database")


def processing(f: staging.Fleet, target: str) -> int:
    """Jobs in processing (the table's own word for it) on a target."""
    shape = SHAPES[target]
    with psycopg.connect(f.dsns[target]) as conn:
        return conn.execute(
            f"SELECT count(*) FROM {shape.table} WHERE {shape.status_column}::text = %s",
            (shape.processing,),
        ).fetchone()[0]


def expire_live_leases(f: staging.Fleet, target: str) -> None:
    """The target's live leases run out, as if their workers died (the lease columns keep the
    design's names on every shape here)."""
    shape = SHAPES[target]
    with psycopg.connect(f.dsns[target], autocommit=True) as conn:
        conn.execute(
            f"UPDATE {shape.table} SET lease_expires_at = now() - interval '1 minute'"
            f" WHERE {shape.status_column}::text = %s AND lease_expires_at > now()",
            (shape.processing,),
        )


def jsonl(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line]


# ---------------------------------------------------------------- reads
def test_stuck_across_targets_tags_every_row_and_names_the_down_one(staged, run):
    code, out, err = run("--all-targets", "stuck", "-o", "jsonl")
    found = jsonl(out)
    by_target = {name: [r["id"] for r in found if r["target"] == name] for name in staged.stuck}
    assert by_target == {
        name: [str(i) if isinstance(i, str) else i for i in ids] for name, ids in staged.ids.items()
    }
    assert all(next(iter(r)) == "target" for r in found)  # the first key
    lines = err.splitlines()
    assert f"jobctl: error: target {staged.down}: cannot connect" in err
    assert sum(staged.down in line for line in lines) == 1  # one line names it
    assert code == 1  # some target failed; the others' output is whole


def test_a_table_across_targets_has_the_target_first(staged, run):
    code, out, _ = run("--target", "orders", "--target", "billing", "stuck")
    header, _rule, *body = out.splitlines()
    assert header.split()[:2] == ["target", "id"]
    assert [line.split()[0] for line in body] == ["orders"] * 3 + ["billing"] * 2
    assert code == 0  # no target failed


def test_one_target_is_exactly_that_database(staged, run):
    _, by_name, _ = run("--target", "billing", "stuck", "-o", "json")
    _, by_dsn, _ = run(
        "--dsn", staged.dsns["billing"], "--table", staged.tables["billing"], "stuck", "-o", "json"
    )
    ages = ("lease_overdue_s", "claimed_age_s")  # read a moment apart
    strip = [{k: v for k, v in r.items() if k not in ages} for r in json.loads(by_name)]
    assert strip == [{k: v for k, v in r.items() if k not in ages} for r in json.loads(by_dsn)]
    assert "target" not in json.loads(by_name)[0]


def test_jobctl_target_names_the_targets(staged, run, monkeypatch):
    monkeypatch.setenv("JOBCTL_TARGET", "orders,billing")
    code, out, _ = run("stuck", "-o", "jsonl")
    assert {r["target"] for r in jsonl(out)} == {"orders", "billing"}
    assert code == 0


def test_summary_per_target_and_a_total(staged, run):
    code, out, err = run("--all-targets", "summary", "-o", "json")
    found = {r["target"]: r for r in json.loads(out)}
    assert list(found) == ["orders", "billing", "emails", "total"]  # the down one: stderr
    assert {name: found[name]["expired"] for name in staged.stuck} == staged.stuck
    # statuses by the part they play: billing's 'running' is processing, 'pending' queued
    assert found["billing"]["processing"] == 3 and found["billing"]["queued"] == 2
    for key in ("queued", "processing", "expired", "ready"):
        assert found["total"][key] == sum(found[n][key] for n in staged.stuck)
    assert f"target {staged.down}" in err and code == 1


def test_metrics_across_targets_one_exposition_with_a_target_label(staged, run):
    from prometheus_client import parser

    code, out, err = run("--all-targets", "metrics", "--max-stuck", "2")
    families = {f.name: f for f in parser.text_string_to_metric_families(out)}
    up = {s.labels["target"]: s.value for s in families["jobctl_target_up"].samples}
    assert up == {"orders": 1, "billing": 1, "emails": 1, staged.down: 0}
    stuck = {}
    for sample in families["jobctl_stuck_jobs"].samples:
        stuck[sample.labels["target"]] = stuck.get(sample.labels["target"], 0) + sample.value
    assert stuck == staged.stuck
    assert "jobctl: CRITICAL: target orders: 3 stuck jobs > --max-stuck 2" in err
    assert code == 1  # a target failed: worse than the breach (4)
    assert families["jobctl_up"].samples[0].value == 0  # not every database answered
    prometheus.check_metrics(out)


def test_metrics_of_one_target_label_it_and_say_when_it_is_down(staged, run):
    code, out, err = run("--target", "orders", "metrics")
    assert code == 0, err
    prometheus.check_metrics(out)
    samples = prometheus.samples(out)
    assert samples[("jobctl_up", (("target", "orders"),))] == 1
    assert samples[("jobctl_target_up", (("target", "orders"),))] == 1
    assert all(dict(labels).get("target") == "orders" for _, labels in samples)
    code, out, err = run("--target", staged.down, "metrics")
    assert code == 1 and "jobctl: error:" in err
    down = prometheus.samples(out)
    assert down[("jobctl_up", (("target", staged.down),))] == 0
    assert down[("jobctl_target_up", (("target", staged.down),))] == 0


def test_a_read_across_targets_waits_on_every_target_at_once(staged, run, server_dsn):
    """Each reachable table locked; the locks go only once jobctl's sessions wait on all
    three at the same time, which a read of one target after another never does."""
    holders = []
    for name in staged.stuck:
        conn = psycopg.connect(staged.dsns[name])
        conn.execute(f"LOCK TABLE {staged.tables[name]} IN ACCESS EXCLUSIVE MODE")
        holders.append(conn)
    databases = [psycopg.conninfo.conninfo_to_dict(staged.dsns[n])["dbname"] for n in staged.stuck]
    at_once = threading.Event()

    def release_when_all_wait() -> None:
        deadline = time.monotonic() + 15
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            while time.monotonic() < deadline:
                waiting = admin.execute(
                    "SELECT count(DISTINCT datname) FROM pg_stat_activity"
                    " WHERE application_name = 'jobctl' AND wait_event_type = 'Lock'"
                    " AND datname = ANY(%s)",
                    (databases,),
                ).fetchone()[0]
                if waiting == len(databases):
                    at_once.set()
                    break
                time.sleep(0.02)
        for conn in holders:
            conn.rollback()

    releaser = threading.Thread(target=release_when_all_wait)
    releaser.start()
    try:
        code, out, _ = run(
            *(a for name in staged.stuck for a in ("--target", name)),
            "--lock-timeout",
            "20s",
            "stuck",
            "-o",
            "jsonl",
        )
    finally:
        releaser.join()
        for conn in holders:
            conn.close()
    assert at_once.is_set(), "jobctl never waited on the three targets at the same time"
    assert code == 0 and len(jsonl(out)) == 5


def lock_waiters(server_dsn: str, database: str) -> int:
    with psycopg.connect(server_dsn) as admin:
        return admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND application_name = 'jobctl' AND wait_event_type = 'Lock'",
            (database,),
        ).fetchone()[0]


@pytest.mark.parametrize("watching", [False, True], ids=["once", "watch"])
def test_ctrl_c_across_targets_cancels_a_slow_target_instead_of_waiting(
    staged, server_dsn, watching
):
    """billing's table locked, jobctl allowed to wait 60 s for it: Ctrl-C while it waits
    ends jobctl in seconds, and its query on billing is cancelled, not left waiting."""
    billing_db = psycopg.conninfo.conninfo_to_dict(staged.dsns["billing"])["dbname"]
    args = ["--target", "orders", "--target", "billing", "--lock-timeout", "60s", "stuck"]
    args += ["--watch", "--every", "0.1s"] if watching else []
    with psycopg.connect(staged.dsns["billing"]) as holder:
        holder.execute(f"LOCK TABLE {staged.tables['billing']} IN ACCESS EXCLUSIVE MODE")
        jobctl = Watching(*args, "-o", "jsonl")  # nothing printed before Ctrl-C
        try:
            deadline = time.monotonic() + 20
            while lock_waiters(server_dsn, billing_db) == 0:
                assert time.monotonic() < deadline and jobctl.proc.poll() is None, "never waited"
                time.sleep(0.05)
        finally:
            pressed = time.monotonic()
            jobctl.proc.send_signal(signal.SIGINT)
            code = jobctl.finish(timeout=90)
            took = time.monotonic() - pressed
        waiting_after = lock_waiters(server_dsn, billing_db)
    err = "".join(jobctl.err)
    assert took < 5, f"Ctrl-C took {took:.1f} s: jobctl waited on billing's lock"
    assert waiting_after == 0
    assert code == (0 if watching else 130), err  # a watch ends at Ctrl-C without error
    assert "Traceback" not in err


def test_jobctl_target_is_a_default_the_command_line_overrides(staged, run, monkeypatch):
    monkeypatch.setenv("JOBCTL_TARGET", "orders")
    code, out, _ = run("--all-targets", "stuck", "-o", "jsonl")
    assert {r["target"] for r in jsonl(out)} == {"orders", "billing"} and code == 1  # down
    code, out, _ = run("--dsn", staged.dsns["billing"], "--table", "tasks", "stuck", "-o", "json")
    assert code == 0 and len(json.loads(out)) == 2


# ---------------------------------------------------------------- one database only
@pytest.mark.parametrize(
    "command",
    [
        ["show", "1"],
        ["history", "1"],
        ["explain", "1"],
        ["requeue", "1", "--yes"],
        ["fail", "1", "--reason", "x", "--yes"],
        ["policy", "1", "--manual", "--yes"],
        ["quarantine"],
        ["events"],
        ["report"],
        ["schema", "check"],
        ["review", "--save-plan", "p.json"],
        ["reclaim", "--id", "1"],
    ],
)
def test_commands_by_id_refuse_several_targets(staged, run, command):
    code, out, err = run("--all-targets", *command)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "--target" in err, err


def test_watch_across_targets_refreshes_every_target_off_a_terminal(staged, run):
    """Off a terminal: one JSON line per refresh with every reachable target's rows; the down
    one said on stderr each refresh; exit 1 (the last refresh was partial)."""
    code, out, err = run(
        "--all-targets", "stuck", "--watch", "--every", "0.1s", "--count", "2", "-o", "jsonl"
    )
    refreshes = jsonl(out)
    assert len(refreshes) == 2 and code == 1
    for refresh in refreshes:
        tagged = {(r["target"], r["id"]) for r in refresh["data"]}
        assert tagged == {(t, i) for t, ids in staged.ids.items() for i in ids}
    assert err.count(f"jobctl: error: target {staged.down}: cannot connect") == 2, err
    assert err.count("targets failed this refresh: its line holds the others' rows") == 2
    code, out, err = run(
        "--target", "orders", "--target", "billing", "summary", "--watch", "--count", "1"
    )
    (refresh,) = jsonl(out)
    assert [r["target"] for r in refresh["data"]] == ["orders", "billing", "total"]
    assert refresh["data"][-1]["expired"] == staged.stuck["orders"] + staged.stuck["billing"]
    assert code == 0 and err == ""


class Watching:
    """``jobctl ARGS`` (a watch, -o jsonl) in the background: its refreshes and its stderr
    as they come, each read by a thread of its own."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobctl", *args],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a shell's job
        )
        self.refreshes: list[dict] = []
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self._refresh)),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err.append)),
        ]
        for reader in self.readers:
            reader.start()

    def _refresh(self, line: str) -> None:
        self.refreshes.append(json.loads(line))

    @staticmethod
    def _read(stream, keep) -> None:
        with stream:
            for line in stream:
                keep(line)

    def finish(self, timeout: float = 20) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.proc.kill()
            self.proc.wait()
            for reader in self.readers:
                reader.join()


def backends(server_dsn: str, database: str) -> set[tuple[int, object]]:
    with psycopg.connect(server_dsn) as admin:
        return set(
            admin.execute(
                "SELECT pid, backend_start FROM pg_stat_activity"
                " WHERE datname = %s AND application_name = 'jobctl'",
                (database,),
            ).fetchall()
        )


def test_watch_across_targets_keeps_one_connection_a_target(staged, server_dsn):
    """Every refresh on the connection the target kept: one backend for the whole watch."""
    orders_db = psycopg.conninfo.conninfo_to_dict(staged.dsns["orders"])["dbname"]
    args = ["--target", "orders", "--target", "billing", "summary", "--watch"]
    watch = Watching(*args, "--every", "0.1s", "--count", "20", "-o", "jsonl")
    seen: set[tuple[int, object]] = set()
    try:
        while watch.proc.poll() is None:
            seen |= backends(server_dsn, orders_db)
            time.sleep(0.01)
    finally:
        code = watch.finish()
    assert len(watch.refreshes) == 20 and code == 0, watch.err
    assert len(seen) == 1, f"{len(seen)} connections to orders for one watch"


@pytest.mark.slow
def test_watch_across_targets_rides_out_a_target_going_down(staged, server_dsn):
    """billing refuses connections (its kept one terminated), then accepts them again: the
    watch says so in the refreshes between and shows billing again, without a restart."""
    billing_db = psycopg.conninfo.conninfo_to_dict(staged.dsns["billing"])["dbname"]
    args = ["--target", "orders", "--target", "billing", "stuck", "--watch", "--every", "0.1s"]
    watch = Watching(*args, "-o", "jsonl")
    refreshes = watch.refreshes

    def targets_in(refresh: dict) -> set[str]:
        return {r["target"] for r in refresh["data"]}

    try:
        wait_until(lambda: len(refreshes) >= 2, what="two refreshes")
        with psycopg.connect(server_dsn, autocommit=True) as admin:  # billing goes down
            admin.execute(f"ALTER DATABASE {billing_db} ALLOW_CONNECTIONS false")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (billing_db,),
            )
        down = len(refreshes)
        wait_until(
            lambda: any(targets_in(r) == {"orders"} for r in refreshes[down:]),
            what="a refresh without billing",
        )
        with psycopg.connect(server_dsn, autocommit=True) as admin:  # and comes back
            admin.execute(f"ALTER DATABASE {billing_db} ALLOW_CONNECTIONS true")
        back = len(refreshes)
        wait_until(
            lambda: any(targets_in(r) == {"orders", "billing"} for r in refreshes[back:]),
            what="billing back in the watch",
        )
        watch.proc.send_signal(signal.SIGINT)
        code = watch.finish()
    finally:
        watch.finish()
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {billing_db} ALLOW_CONNECTIONS true")
    err = "".join(watch.err)
    assert "jobctl: error: target billing: " in err and "Traceback" not in err, err
    assert code == 0, err  # the last refresh had every target


def test_show_with_one_target(staged, run):
    job = staged.ids["billing"][0]
    code, out, _ = run("--target", "billing", "show", str(job), "-o", "json")
    assert code == 0 and json.loads(out)["id"] == job


# ---------------------------------------------------------------- the config file
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[targets.a\n", "not valid TOML"),
        ('[targets.a]\ndsn = "x"\nhost = "y"\n', "unknown key 'host'"),
        ('[targets.a]\ntable = "jobs"\n', "needs exactly one of dsn, service or dsn_env"),
    ],
)
def test_config_file_errors_are_one_line_exit_2(run, tmp_path, monkeypatch, text, says):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    monkeypatch.setenv("JOBCTL_CONFIG", str(path))
    code, out, err = run("--target", "a", "stuck")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err and str(path) in err
    assert "Traceback" not in err


def test_an_unknown_target_names_the_known_ones(staged, run):
    code, _, err = run("--target", "ordres", "stuck")
    assert code == 2
    assert err.strip() == (
        f"jobctl: error: unknown target 'ordres': the targets of {staged.config} are "
        f"orders, billing, emails, {staged.down}"
    )


def test_targets_lists_and_checks_without_a_password(staged, run, tmp_path, monkeypatch):
    text = staged.config.read_text().replace(
        "dbname=jobctl_orders", "password=hunter2 dbname=jobctl_orders"
    )
    assert "hunter2" in text
    secret = tmp_path / "secret.toml"
    secret.write_text(text)
    os.chmod(secret, 0o644)  # readable by others, with a password: warned
    monkeypatch.setenv("JOBCTL_CONFIG", str(secret))
    code, out, err = run("targets", "--check", "-o", "json")
    found = {r["target"]: r for r in json.loads(out)}
    assert list(found) == ["orders", "billing", "emails", staged.down]
    assert all(found[n]["reachable"] and found[n]["schema"] == "applied" for n in staged.stuck)
    assert {n: found[n]["stuck"] for n in staged.stuck} == staged.stuck
    assert found["orders"]["role"] == "primary"
    assert not found[staged.down]["reachable"] and "cannot connect" in found[staged.down]["problem"]
    assert found["emails"]["from"] == f"${staging.EMAILS_ENV}"
    assert "hunter2" not in out + err
    assert "holds a password and others can read it" in err
    assert code == 1  # one target failed its check
    code, out, _ = run("targets")
    assert code == 0 and "hunter2" not in out


# ---------------------------------------------------------------- writes
def test_reclaim_across_targets_each_target_its_own(copied, run):
    code, out, err = run("--all-targets", "reclaim", "--commit", "--yes", "-o", "jsonl")
    done = jsonl(out)
    assert {n: sum(r["target"] == n and r["applied"] for r in done) for n in copied.stuck} == (
        copied.stuck
    )
    assert "target orders: reclaimed: 2 requeued, 1 failed" in err
    assert "target billing: reclaimed: 2 requeued, 0 parked in manual_review" in err
    assert f"jobctl: error: target {copied.down}" in err and code == 1
    for name in copied.stuck:
        assert (
            processing(copied, name)
            == copied.stuck[name] * 0 + {"orders": 2, "billing": 1, "emails": 2}[name]
        )  # the live leases stay


def test_reclaim_across_targets_has_one_csv_header_with_rows_or_none(copied, run):
    """Across targets (each its own mapping) reclaim's csv header is the target, then one
    database's header where the table maps kind and queue (no priority: a reclaim row never
    carries it): the dry run's and the commit's, with rows and with none left."""
    one = run("--target", "orders", "reclaim", "-o", "csv")  # orders maps neither
    one_header = next(csv.reader(io.StringIO(one.out)))
    header = ["target", *rows.with_optional(rows.RECLAIM_KEYS, ("kind", "queue"))]
    assert [k for k in header if k not in ("target", "kind", "queue")] == one_header
    dry = run("--all-targets", "reclaim", "-o", "csv")
    done = run("--all-targets", "reclaim", "--commit", "--yes", "-o", "csv")
    again = run("--all-targets", "reclaim", "--commit", "--yes", "-o", "csv")
    found = [list(csv.reader(io.StringIO(r.out))) for r in (dry, done, again)]
    assert [len(lines) > 1 for lines in found] == [True, True, False], found
    assert found[0][0] == found[1][0] == found[2][0]
    assert found[0][0] == header and header[:4] == ["target", "id", "kind", "queue"]


def test_a_target_lost_mid_commit_says_what_it_committed_and_the_next_goes_on(copied):
    """orders (3,000 more stuck jobs, batches of 20) loses jobctl's connection mid-commit:
    one line says how many were committed before the loss, billing is reclaimed after it."""
    with psycopg.connect(copied.dsns["orders"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (status, attempts, reserved_by, attempt_token, lease_expires_at)"
            " SELECT 'processing', 1, 'dead', gen_random_uuid(), now() - interval '1 minute'"
            " FROM generate_series(1, 3000)"
        )
    orders_db = psycopg.conninfo.conninfo_to_dict(copied.dsns["orders"])["dbname"]
    command = [sys.executable, "-m", "jobctl", "--target", "orders", "--target", "billing"]
    command += ["reclaim", "--commit", "--yes", "--batch-size", "20", "-o", "jsonl"]
    proc = subprocess.Popen(
        command,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )

    def reclaimed() -> int:
        with psycopg.connect(copied.dsns["orders"]) as conn:
            return conn.execute("SELECT count(*) FROM jobs WHERE reclaim_count > 0").fetchone()[0]

    try:
        wait_until(lambda: reclaimed() >= 200 or proc.poll() is not None, what="200 reclaimed")
        with psycopg.connect(copied.dsns["orders"], autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name = 'jobctl'",
                (orders_db,),
            ).fetchone()[0]
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert killed == 1, "jobctl had finished orders before the loss: too few jobs"
    lines = [line for line in err.splitlines() if line.startswith("jobctl: error: target orders")]
    assert len(lines) == 1, err
    said = int(lines[0].split("before the loss: ")[1].split()[0])
    assert "re-running the same command is safe" in lines[0] and "Traceback" not in err
    done = [r for r in jsonl(out) if r["applied"]]
    assert 200 <= sum(r["target"] == "orders" for r in done) <= said <= reclaimed() < 3003
    assert sum(r["target"] == "billing" for r in done) == copied.stuck["billing"]
    assert processing(copied, "billing") == 1  # only its live lease left
    assert proc.returncode == 1


def test_reclaim_across_targets_off_a_terminal_asks_for_yes(staged, run):
    code, _, err = run("--target", "orders", "--target", "billing", "reclaim", "--commit")
    assert code == 2 and "--yes" in err
    assert processing(staged, "orders") == 5  # 3 stuck + 2 live: nothing changed


def test_reclaim_across_targets_writes_what_was_confirmed(copied, run, monkeypatch):
    """The live leases of orders run out while the question is up: 'yes' reclaims what the
    question showed on each target, not the leases that expired after it."""
    from jobctl.cli import terminal

    asked = []

    def answer_yes_late(question, about=(), title=""):
        asked.append(question)
        expire_live_leases(copied, "orders")  # 2 live leases run out while a person reads

    monkeypatch.setattr(terminal, "confirm", answer_yes_late)
    code, out, err = run(
        "--target", "orders", "--target", "billing", "reclaim", "--commit", "-o", "jsonl"
    )
    assert code == 0, err
    assert asked == ["Reclaim 5 expired job(s) on 2 target(s)?"]
    done = [r for r in jsonl(out) if r["applied"]]
    assert sum(r["target"] == "orders" for r in done) == 3  # not 5
    assert processing(copied, "orders") == 2  # the two expired after the question: left


def test_a_plan_across_targets_records_each_target_and_applies_there_only(copied, run, tmp_path):
    plan = tmp_path / "p.json"
    code, _, err = run(
        "--target", "orders", "--target", "billing", "reclaim", "--save-plan", str(plan)
    )
    assert code == 0, err
    parts = json.loads(plan.read_text())["parts"]
    assert [p["where"]["target"] for p in parts] == ["orders", "billing"]
    assert [len(p["rows"]) for p in parts] == [3, 2]

    # the plan names billing: a command not addressing it is refused, nothing done
    code, _, err = run(
        "--target",
        "orders",
        "--target",
        "emails",
        "reclaim",
        "--commit",
        "--plan",
        str(plan),
        "--yes",
    )
    assert code == 2 and "--target billing" in err
    # one target: the plan across targets is not its kind
    code, _, err = run("--target", "orders", "reclaim", "--commit", "--plan", str(plan), "--yes")
    assert code == 2 and "across targets" in err
    assert processing(copied, "orders") == 5

    # a part moved to another target's name is refused there (made for another database);
    # each target's part stands alone, as each target's reclaim does: billing's applies
    swapped = json.loads(plan.read_text())
    swapped["parts"][0]["where"]["target"] = "emails"
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(swapped))
    os.chmod(moved, 0o600)
    code, out, err = run(
        "--all-targets", "reclaim", "--commit", "--plan", str(moved), "--yes", "-o", "jsonl"
    )
    assert "target emails: plan" in err and "was made for database" in err and code == 1
    assert [(r["target"], r["applied"]) for r in jsonl(out)] == [("billing", True)] * 2
    assert processing(copied, "orders") == 5 and processing(copied, "emails") == 2

    code, out, err = run(
        "--all-targets", "reclaim", "--commit", "--plan", str(plan), "--yes", "-o", "jsonl"
    )
    assert code == 0, err  # the down target is not in the plan: not touched
    assert [(r["target"], r["applied"]) for r in jsonl(out)] == [("orders", True)] * 3 + [
        ("billing", False)  # reclaimed since the review: fenced out
    ] * 2
    assert processing(copied, "orders") == 2 and processing(copied, "billing") == 1


def test_a_plan_saved_on_one_target_records_it_and_applies_on_that_database(copied, run, tmp_path):
    plan = tmp_path / "one.json"
    assert run("--target", "billing", "reclaim", "--save-plan", str(plan)).code == 0
    assert json.loads(plan.read_text())["where"]["target"] == "billing"
    code, _, err = run("--target", "orders", "reclaim", "--commit", "--plan", str(plan), "--yes")
    assert code == 2 and "was made for database" in err
    code, _, err = run("--all-targets", "reclaim", "--commit", "--plan", str(plan), "--yes")
    assert code == 2 and "applies with that one --target" in err
    code, _, _ = run("--target", "billing", "reclaim", "--commit", "--plan", str(plan), "--yes")
    assert code == 0 and processing(copied, "billing") == 1


def test_review_across_targets(copied, run):
    assert run("--all-targets", "reclaim", "--commit", "--yes").code == 1  # down: 1
    code, out, err = run("--target", "orders", "--target", "billing", "review", "-o", "jsonl")
    found = jsonl(out)
    # orders: the manual job, failed; billing: nothing exhausted, nothing manual
    assert [(r["target"], r["id"]) for r in found] == [("orders", copied.ids["orders"][0])]
    assert code == 0, err


# ---------------------------------------------------------------- the service
@pytest.mark.slow
def test_the_service_serves_every_target_and_rides_out_one_going_down(copied, server_dsn):
    env = {**os.environ, "JOBCTL_ACTOR": "tester@ci"}
    service = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobctl",
            "--target",
            "orders",
            "--target",
            "billing",
            "reclaim",
            "--commit",
            "--yes",
            "--every",
            "0.2s",
            "-o",
            "jsonl",
        ],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    billing_db = psycopg.conninfo.conninfo_to_dict(copied.dsns["billing"])["dbname"]

    def stuck_left(name: str) -> int:
        shape = SHAPES[name]
        with psycopg.connect(copied.dsns[name]) as conn:
            return conn.execute(
                f"SELECT count(*) FROM {shape.table} WHERE {shape.status_column}::text = %s"
                " AND lease_expires_at < now()",
                (shape.processing,),
            ).fetchone()[0]

    try:
        wait_until(
            lambda: stuck_left("orders") == 0 and stuck_left("billing") == 0,
            what="the first pass on both targets",
        )
        with psycopg.connect(server_dsn, autocommit=True) as admin:  # billing goes down
            admin.execute(f"ALTER DATABASE {billing_db} ALLOW_CONNECTIONS false")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (billing_db,),
            )
        expire_live_leases(copied, "orders")  # its 2 live leases run out
        wait_until(lambda: stuck_left("orders") == 0, what="orders served, billing down")
        with psycopg.connect(server_dsn, autocommit=True) as admin:  # and comes back
            admin.execute(f"ALTER DATABASE {billing_db} ALLOW_CONNECTIONS true")
        expire_live_leases(copied, "billing")  # its 1 live lease runs out
        wait_until(lambda: stuck_left("billing") == 0, timeout=30, what="billing back")
        service.send_signal(signal.SIGTERM)
        out, err = service.communicate(timeout=20)
    finally:
        service.kill()
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {billing_db} ALLOW_CONNECTIONS true")
    applied = [r for r in jsonl(out) if r["applied"]]
    assert sorted(r["target"] for r in applied) == ["billing"] * 3 + ["orders"] * 5
    assert "target billing: reclaimer: " in err and "retrying" in err
    assert "target billing: reclaimer: reconnected" in err
    assert "Traceback" not in err and service.returncode == 0, err


def test_the_fixture_config_is_private(staged):
    assert Path(staged.config).stat().st_mode & 0o077 == 0


def test_metrics_across_targets_carry_each_targets_pauses(copied, run):
    """A pause on orders is its series with target="orders" across targets; the other
    targets, with none, have none."""
    with psycopg.connect(copied.dsns["orders"], autocommit=True) as conn:
        conn.execute("ALTER TABLE jobs ADD COLUMN kind text DEFAULT 'charge_card'")
    code, _, err = run("--target", "orders", "schema", "apply", "--column", "kind=kind", "--yes")
    assert code == 0, err
    code, _, err = run("--target", "orders", "pause", "--kind", "charge_card", "--reason", "x")
    assert code == 0, err
    code, out, err = run("--all-targets", "metrics")
    prometheus.check_metrics(out)
    assert prometheus.duplicate_series(out) == []
    waiting = {
        labels: value
        for (name, labels), value in prometheus.samples(out).items()
        if name == "jobctl_pause_waiting_jobs"
    }
    labels = (("dimension", "kind"), ("table", "public.jobs"), ("target", "orders"))
    assert waiting == {(*labels, ("value", "charge_card")): 4}
