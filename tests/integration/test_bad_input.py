"""Bad input: one line on stderr, the documented exit code, no traceback, nothing changed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer
from helpers import add_jobs, claim_all, jobctl_process, snapshot

SECRET = "s3cr3t-pw"


def assert_one_line(result, code: int, *needles: str) -> None:
    assert result.code == code, (result.code, result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    for needle in needles:
        assert needle in result.err, result.err


BAD_INPUT = [
    (["show", "abc"], 2, "job id 'abc' is not a valid bigint (the type of the id column id)"),
    (["show", "-5"], 2, ""),
    (["show", "99999999999999999999"], 2, "not a valid bigint"),
    (["reclaim", "--id", "12x"], 2, "job id '12x' is not a valid bigint"),
    (["requeue", "1", "abc", "--yes"], 2, "job id 'abc' is not a valid bigint"),
    (["history", "1e3"], 2, "not a valid bigint"),
    (["stuck", "-o", "yaml"], 2, "yaml"),
    (["stuck", "--format", "nope"], 2, "not a tabulate format"),
    (["stuck", "--policy", "sometimes"], 2, "auto or manual"),
    (["stuck", "--grace", "5 minutes"], 2, "not a duration"),
    (["stuck", "--grace", "-1s"], 2, "not a duration"),
    (["stuck", "--exit-code", "--watch", "--count", "1"], 2, "--exit-code answers once"),
    (["--lock-timeout", "forever", "stuck"], 2, "not a duration"),
    (["summary", "--expiring-within", "1y"], 2, "not a duration"),
    (["reclaim", "--batch-size", "0"], 2, "Invalid value for '--batch-size'"),
    (["reclaim", "--batch-size", "10001"], 2, "Invalid value for '--batch-size'"),
    (["reclaim", "--every", "5s"], 2, "needs --commit --yes"),
    (["reclaim", "--plan", "p.json"], 2, "needs --commit"),
    (["reclaim", "--commit", "--plan", "/nonexistent/plan.json", "--yes"], 2, "cannot read plan"),
    (["requeue", "1", "--expect-token", "not-a-uuid", "--yes"], 2, "not a UUID"),
    (["requeue", "1", "--delay", "soon", "--yes"], 2, "not a duration"),
    (["fail", "1", "--yes"], 2, "needs --reason"),
    (["fail", "1", "--reason", "  ", "--yes"], 2, "needs --reason"),
    (["--table", "jobs; DROP TABLE jobs", "stuck"], 2, "not a table name"),
    (["--table", "a.b.c", "stuck"], 2, "not a table name"),
    (["--table", "nosuch", "stuck"], 1, "nosuch does not exist"),
    (["--table", "nosuch.jobs", "summary"], 1, "does not exist"),
    (["show", "424242"], 1, "not found"),
    (["history", "424242"], 1, "not found"),
    (["requeue", "1"], 2, "pass --yes"),
    (["reclaim", "--commit"], 2, "pass --yes"),
    (["schema", "apply"], 2, "pass --yes"),
    (["nosuchcommand"], 2, "nosuchcommand"),
    (["explain", "abc"], 2, "not a valid bigint"),
    (["policy", "abc", "--auto", "--yes"], 2, "not a valid bigint"),
    (["policy", "424242", "--auto", "--yes"], 1, ""),
    (["quarantine", "--min-reclaims", "0"], 2, ""),
    (["policy", "1", "--manual"], 2, "pass --yes"),
    (["metrics", "--max-overdue", "soon"], 2, "not a duration"),
    (["metrics", "--max-stuck", "-1"], 2, ""),
    (["metrics", "--reclaim-window", "\x1b[31m"], 2, "not a duration"),
    (["stuck", "--watch", "--every", "never"], 2, "not a duration"),
    (["stuck", "--limit", "99999999999"], 2, ""),
    (["reclaim", "--limit", "0"], 2, ""),
    (["reclaim", "--save-plan", "/nonexistent/dir/p.json"], 2, "cannot write plan"),
    (["reclaim", "--commit", "--plan", "p.json", "--worker", "w1", "--yes"], 2, "no filters"),
    (
        ["requeue", "1", "2", "--expect-token", "00000000-0000-0000-0000-000000000000", "--yes"],
        2,
        "one job id",
    ),
    (["--table", "jöbs", "stuck"], 2, "not a table name"),
    (["--statement-timeout", "1e400", "stuck"], 2, "not a duration"),
]


@pytest.mark.parametrize(("args", "code", "needle"), BAD_INPUT, ids=lambda v: str(v))
def test_bad_input(conn, dsn, run, args, code, needle):
    add_jobs(conn, 3)
    claim_all(dsn, 2)
    before = snapshot(conn)
    assert_one_line(run(*args), code, needle)
    assert snapshot(conn) == before


def test_table_without_lease_columns_says_schema_apply(conn, run):
    """Not 'run jobctl schema apply' (it would refuse this table): the columns to name."""
    conn.execute("CREATE TABLE bare (id bigint PRIMARY KEY, status text)")
    assert_one_line(run("--table", "bare", "stuck"), 1, "name the table's own with --column")


def test_unreachable_database_no_password(monkeypatch, capsys):
    from jobctl.cli import main as cli

    for dsn in (
        f"postgresql://ops:{SECRET}@127.0.0.1:1/x?connect_timeout=2",
        f"host=127.0.0.1 port=1 user=ops password={SECRET} connect_timeout=2",
        f"postgresql://ops:{SECRET}@127.0.0.1:1/x?bogus_option=1",
        f"host=127.0.0.1 password={SECRET} nonsense",
        f"postgresql://ops:{SECRET}@[::1",
    ):
        for debug in ([], ["--debug"]):
            code = cli.main([*debug, "--dsn", dsn, "stuck"])
            captured = capsys.readouterr()
            assert code in (1, 2), dsn
            assert SECRET not in captured.err + captured.out, captured.err
            if not debug:
                assert len(captured.err.strip().splitlines()) == 1, captured.err


def test_process_exit_codes_and_no_tty(dsn, conn):
    """The installed entry point, as a real process without a terminal."""
    add_jobs(conn, 1)
    claim_all(dsn, 1)
    stuck = jobctl_process(dsn, "stuck", "--exit-code")
    assert stuck.returncode == 4 and "\x1b[" not in stuck.stdout
    commit = jobctl_process(dsn, "reclaim", "--commit")
    assert commit.returncode == 2 and "--yes" in commit.stderr
    assert json.loads(jobctl_process(dsn, "stuck", "-o", "json").stdout)[0]["id"] == 1


def test_version_and_help_for_every_command(run):
    assert run("--version").out.startswith("jobctl ")
    from jobctl.cli import commands as table
    from jobctl.cli import main as cli

    listed = typer.main.get_command(cli.app).list_commands(None)  # type: ignore[attr-defined]
    commands = [name for name in listed if not isinstance(table.COMMANDS[name], table.Group)]
    assert {
        "stuck",
        "summary",
        "show",
        "history",
        "explain",
        "reclaim",
        "requeue",
        "fail",
        "quarantine",
        "policy",
        "metrics",
        "demo",
        "review",
        "events",
        "report",
    } <= set(commands)
    schema = [f"schema {name}" for name in table.COMMANDS["schema"].commands]
    assert set(schema) == {
        "schema apply",
        "schema remove",
        "schema grants",
        "schema check",
        "schema statements",
    }
    for name in [*commands, *schema]:
        result = run(*name.split(), "--help")
        assert result.code == 0 and "Example" in result.out, name


def test_help_does_not_import_psycopg_or_tabulate():
    code = (
        "import sys; from jobctl.cli import main as cli; "
        "sys.argv=['jobctl','--help']; cli.main(['--help']); "
        "print(sorted(m for m in ('psycopg','tabulate','rich.table') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def test_a_mistyped_table_is_answered_with_the_tables_jobctl_serves(conn, run):
    """The tables jobctl serves in that database, and the closest name."""
    assert_one_line(
        run("--table", "jbos", "stuck"),
        1,
        "table jbos does not exist in database",
        "; jobctl serves public.jobs here (did you mean jobs?): set --table or JOBCTL_TABLE",
    )


def test_a_forgotten_jobctl_table_names_the_table_served(conn, run, monkeypatch):
    """The default table (jobs) missing, the person's own served: named, no guess needed."""
    conn.execute("ALTER TABLE jobs RENAME TO background_tasks")
    monkeypatch.delenv("JOBCTL_TABLE", raising=False)
    result = run("summary")
    assert_one_line(result, 1, "table jobs does not exist", "jobctl serves public.background_tasks")
    assert_one_line(
        run("--table", "backgroud_tasks", "summary"),
        1,
        "jobctl serves public.background_tasks here (did you mean background_tasks?)",
    )
