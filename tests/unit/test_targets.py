"""The config file's targets and the fan-out's pure parts: no database."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time

import pytest
from prometheus_client import parser

from jobctl import errors, targets
from jobctl.ops import fleet, summary
from jobctl.render import openmetrics

GOOD = """
[defaults]
lock_timeout = "1s"
actor = "oncall@example.com"

[targets.orders]
dsn = "host=db-eu.internal dbname=orders user=oncall password=s3cret"

[targets.billing]
dsn_env = "BILLING_DSN"
table = "billing.jobs"
lock_timeout = "250ms"

[targets.emails]
service = "emails"
"""


@pytest.fixture
def config(tmp_path, monkeypatch):
    """Write a config file (mode 0600) and point JOBCTL_CONFIG at it."""
    monkeypatch.delenv("JOBCTL_TABLE", raising=False)
    monkeypatch.delenv("JOBCTL_ACTOR", raising=False)

    def write(text: str, mode: int = 0o600):
        path = tmp_path / "config.toml"
        path.write_text(text)
        os.chmod(path, mode)
        monkeypatch.setenv("JOBCTL_CONFIG", str(path))
        return path

    return write


def test_targets_in_the_files_order_with_their_settings(config, monkeypatch):
    config(GOOD)
    monkeypatch.setenv("BILLING_DSN", "host=db-us.internal dbname=billing")
    loaded = targets.load()
    assert list(loaded.targets) == ["orders", "billing", "emails"]
    orders, billing, emails = loaded.targets.values()
    assert orders.settings.dsn.startswith("host=db-eu.internal")
    assert orders.settings.table == "jobs"
    assert orders.settings.lock_timeout == dt.timedelta(seconds=1)  # [defaults]
    assert orders.settings.actor == "oncall@example.com"
    assert orders.settings.target == "orders"
    assert "s3cret" not in orders.where and orders.where == "db-eu.internal/orders"
    assert billing.settings.dsn == "host=db-us.internal dbname=billing"
    assert billing.settings.table == "billing.jobs"
    assert billing.settings.lock_timeout == dt.timedelta(milliseconds=250)  # its own wins
    assert (billing.where, billing.source) == ("db-us.internal/billing", "$BILLING_DSN")
    assert emails.settings.dsn == "service='emails'"
    assert (emails.where, emails.source) == ("service emails", "service")
    assert not loaded.warnings  # 0600: nobody else reads the password


def test_the_command_line_wins_over_the_file_and_the_file_over_the_environment(config, monkeypatch):
    config(GOOD)
    monkeypatch.setenv("JOBCTL_TABLE", "from_env")
    monkeypatch.setenv("JOBCTL_ACTOR", "env@actor")
    loaded = targets.load(overrides={"lock_timeout": dt.timedelta(seconds=9)})
    orders, billing, _ = loaded.targets.values()
    assert orders.settings.table == "from_env"  # the file says nothing: the environment
    assert billing.settings.table == "billing.jobs"  # the file says it
    assert orders.settings.actor == "oncall@example.com"
    assert billing.settings.lock_timeout == dt.timedelta(seconds=9)


def test_an_unset_dsn_env_is_that_targets_problem_only(config, monkeypatch):
    monkeypatch.delenv("BILLING_DSN", raising=False)
    monkeypatch.setenv("JOBCTL_DSN", "host=elsewhere")  # never a fallback for a target
    path = config(GOOD)
    billing = targets.load().targets["billing"]
    assert billing.problem == (
        f"its dsn_env BILLING_DSN is not set (or empty) (config file {path} [targets.billing])"
    )
    with pytest.raises(errors.UsageError, match="target billing: its dsn_env BILLING_DSN"):
        billing.check()
    assert billing.settings.resolved_dsn() == ""  # not JOBCTL_DSN's
    from jobctl import db

    with pytest.raises(errors.UsageError, match="target billing has no connection string"):
        db.connect(billing.settings)  # nor libpq's defaults, whoever asks


def test_a_password_others_can_read_is_warned_of(config):
    path = config(GOOD, mode=0o644)
    (line,) = targets.load().warnings
    assert str(path) in line and "-rw-r--r--" in line and "chmod 600" in line
    assert "s3cret" not in line


def test_no_password_no_warning_whatever_the_mode(config, monkeypatch):
    config('[targets.a]\ndsn = "host=x dbname=y"\n', mode=0o644)
    assert not targets.load().warnings
    # a password in the environment variable dsn_env names is not in the file
    monkeypatch.setenv("A_DSN", "host=x password=s3cret")
    config('[targets.a]\ndsn_env = "A_DSN"\n', mode=0o644)
    assert not targets.load().warnings


# ---------------------------------------------------------------- files others could write
# One rule (targets.check_trusted) for the config file and for plans
PLAN = '{"format": "jobctl-test-plan/1", "rows": []}'
NOBODY = 65534  # another user's uid (nobody's): the tests may run as root


def _read(kind: str, path):
    """Read ``path`` as jobctl reads a config file or a saved plan."""
    from jobctl.ops import plans

    if kind == "config":
        return targets.load(path)
    return plans.read_document(path, "jobctl-test-plan/1", "jobctl plan", "")


def _made(tmp_path, kind: str, *, mode: int = 0o600, directory_mode: int = 0o700):
    directory = tmp_path / "d"
    directory.mkdir()
    path = directory / ("config.toml" if kind == "config" else "plan.json")
    path.write_text(GOOD if kind == "config" else PLAN)
    os.chmod(path, mode)
    os.chmod(directory, directory_mode)
    return path


@pytest.mark.parametrize("kind", ["config", "plan"])
@pytest.mark.parametrize(
    ("mode", "directory_mode", "says"),
    [
        (0o666, 0o700, "it is writable by others (-rw-rw-rw-); refused: chmod go-w {path}"),
        (0o620, 0o700, "it is writable by others (-rw--w----); refused: chmod go-w {path}"),
        (0o600, 0o777, "its directory {dir} is writable by others (drwxrwxrwx, not sticky)"),
        (0o600, 0o770, "refused: chmod go-w {dir}, or move the file"),
    ],
    ids=["file-0666", "file-0620", "directory-0777", "directory-0770"],
)
def test_a_file_others_could_write_is_refused(
    tmp_path, monkeypatch, kind, mode, directory_mode, says
):
    monkeypatch.delenv("JOBCTL_CONFIG", raising=False)
    path = _made(tmp_path, kind, mode=mode, directory_mode=directory_mode)
    with pytest.raises(errors.UsageError) as refused:
        _read(kind, path)
    message = refused.value.message
    assert says.format(path=path, dir=path.parent) in message, message
    assert message.startswith(f"{'config file' if kind == 'config' else 'plan'} {path} ")
    assert "\n" not in message and refused.value.exit_code == errors.EXIT_USAGE


@pytest.mark.parametrize("kind", ["config", "plan"])
def test_a_file_only_its_owner_can_write_is_read(tmp_path, monkeypatch, kind):
    monkeypatch.delenv("JOBCTL_CONFIG", raising=False)
    path = _made(tmp_path, kind, mode=0o644, directory_mode=0o755)  # others may read it
    assert _read(kind, path)
    sticky = tmp_path / "sticky"  # like /tmp: others cannot rename nor remove it there
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    moved = path.rename(sticky / path.name)
    assert _read(kind, moved)


@pytest.mark.parametrize("kind", ["config", "plan"])
def test_a_link_into_a_directory_others_can_write_is_refused(tmp_path, monkeypatch, kind):
    monkeypatch.delenv("JOBCTL_CONFIG", raising=False)
    real = _made(tmp_path, kind, directory_mode=0o777)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = mine / real.name
    link.symlink_to(real)
    with pytest.raises(errors.UsageError, match="is writable by others"):
        _read(kind, link)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
@pytest.mark.parametrize("kind", ["config", "plan"])
def test_a_file_or_directory_of_another_user_is_refused(tmp_path, monkeypatch, kind):
    monkeypatch.delenv("JOBCTL_CONFIG", raising=False)
    path = _made(tmp_path, kind, mode=0o644, directory_mode=0o755)
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(errors.UsageError) as refused:
        _read(kind, path)
    assert f"{path} may have been changed by another user: it belongs to uid {NOBODY}" in (
        refused.value.message
    )
    os.chown(path, 0, 0)
    os.chown(path.parent, NOBODY, NOBODY)  # who owns the directory can swap the file
    with pytest.raises(errors.UsageError) as refused:
        _read(kind, path)
    assert f"its directory {path.parent} belongs to uid {NOBODY}" in refused.value.message
    assert "move the file into a directory of your own" in refused.value.message


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[targets.a\ndsn = 1", "not valid TOML"),
        ('[targets.a]\ndsn = "x"\nport = "5432"\n', "[targets.a]: unknown key 'port'"),
        ('[target.a]\ndsn = "x"\n', "unknown key 'target' (known: defaults, targets)"),
        ('[targets.a]\ntable = "jobs"\n', "[targets.a] needs exactly one of dsn, service"),
        ('[targets.a]\ndsn = "x"\nservice = "y"\n', "(it has dsn and service)"),
        ('[targets.a]\ndsn = "x"\nlock_timeout = "soon"\n', "[targets.a]: lock_timeout"),
        ('[targets.a]\ndsn = "x"\nlock_timeout = "0s"\n', "lock_timeout must be 1ms"),
        ("[targets.a]\ndsn = 5\n", "[targets.a]: dsn must be a string"),
        ('[defaults]\ndsn = "x"\n', "[defaults]: unknown key 'dsn'"),
        ("targets = 3\n", "[targets] must be a table"),
        ('[targets."a b"]\ndsn = "x"\n', "target name 'a b'"),
        ('[targets.total]\ndsn = "x"\n', "target name 'total' is taken"),
        ('[targets."\\u001b[31m"]\ndsn = "x"\n', "target name '\\x1b[31m'"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_it(config, text, says):
    path = config(text)
    with pytest.raises(errors.UsageError) as raised:
        targets.load()
    assert says in raised.value.message
    assert str(path) in raised.value.message and "\n" not in raised.value.message
    assert raised.value.exit_code == errors.EXIT_USAGE


def test_a_missing_named_config_file_is_an_error_the_default_one_no_targets(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBCTL_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(errors.UsageError, match="does not exist"):
        targets.load()
    monkeypatch.delenv("JOBCTL_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert targets.load().targets == {}


def test_an_unknown_target_names_the_known_ones(config):
    path = config(GOOD)
    with pytest.raises(errors.UsageError) as raised:
        targets.load().select(["orders", "biling"])
    assert raised.value.message == (
        f"unknown target 'biling': the targets of {path} are orders, billing, emails"
    )


def test_what_a_command_addresses(config, monkeypatch):
    config(GOOD)
    monkeypatch.setenv("BILLING_DSN", "host=b")
    from jobctl import db

    plain = db.Settings(dsn="host=plain")
    kw = {"dsn": None, "one": plain, "overrides": {}, "warn": print}
    assert targets.address([], False, **kw) is plain
    assert targets.address(["billing"], False, **kw).dsn == "host=b"
    several = targets.address(["billing", "orders"], False, **kw)
    assert [t.name for t in several.targets] == ["billing", "orders"]
    assert len(targets.address([], True, **kw).targets) == 3
    with pytest.raises(errors.UsageError, match="--dsn and --target"):
        targets.address(["orders"], False, **{**kw, "dsn": "host=x"})
    with pytest.raises(errors.UsageError, match="no --target with it"):
        targets.address(["orders"], True, **kw)
    with pytest.raises(errors.UsageError, match="name one with --target, not several"):
        targets.one_database(several, "jobctl show")


def test_jobctl_target_takes_names_separated_by_commas_or_spaces(monkeypatch):
    monkeypatch.setenv("JOBCTL_TARGET", "orders, billing emails")
    assert targets.from_environment() == ["orders", "billing", "emails"]


def test_completion_offers_target_names_and_never_fails(config, monkeypatch):
    config(GOOD)
    assert targets.names("b") == ["billing"]
    config("not toml [")
    assert targets.names("") == []


# ---------------------------------------------------------------- the fan-out


def _targets(*names: str) -> list[targets.Target]:
    from jobctl import db

    return [targets.Target(n, db.Settings(dsn=f"dbname={n}", target=n), n) for n in names]


def test_across_runs_at_once_keeps_the_targets_order_and_each_failure():
    started = threading.Barrier(3, timeout=5)  # all three inside work at once, or it breaks

    def work(target, say):
        started.wait()
        time.sleep(0.05 if target.name == "a" else 0)  # a answers last
        say(f"hello from {target.name}")
        if target.name == "b":
            raise errors.ConnectError("cannot connect: password=hunter2 refused")
        return target.name.upper()

    a, b, c = fleet.across(_targets("a", "b", "c"), work)
    assert (a.value, b.value, c.value) == ("A", None, "C")
    assert a.said == ["hello from a"]
    assert fleet.failure_line(b) == "target b: cannot connect: password=*** refused"
    assert fleet.exit_code([a, b, c]) == errors.EXIT_ERROR
    assert fleet.exit_code([a, c]) == errors.EXIT_OK


def test_any_failed_target_is_exit_1_whatever_its_own_code():
    def work(target, say):
        raise errors.Refused("a standby: refused")  # 2 on one database

    assert fleet.exit_code(fleet.across(_targets("a", "b"), work)) == errors.EXIT_ERROR


def test_a_target_without_its_dsn_fails_alone_naming_why(config, monkeypatch):
    config(GOOD)
    monkeypatch.delenv("BILLING_DSN", raising=False)
    chosen = list(targets.load().targets.values())[:2]
    orders, billing = fleet.across(chosen, lambda target, say: target.name)
    assert orders.value == "orders"
    assert fleet.failure_line(billing).startswith(
        "target billing: its dsn_env BILLING_DSN is not set"
    )  # once "target billing", and the file it is in
    assert "config file" in fleet.failure_line(billing)


def test_a_plan_with_two_parts_for_one_target_is_refused(tmp_path):
    from jobctl.ops import plans

    part = ({"target": "a", "database": "x"}, [{"id": 1}])
    path = tmp_path / "p.json"
    plans.write_parts(path, "f/1", [part, part])
    with pytest.raises(errors.UsageError, match="two parts for target a"):
        plans.read_parts(path, "f/1", ["id"])


def test_across_is_bounded():
    inside, most = [0], [0]
    lock = threading.Lock()

    def work(target, say):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with lock:
            inside[0] -= 1

    fleet.across(_targets(*"abcdefgh"), work, at_once=3)
    assert most[0] == 3


def test_a_bug_in_one_target_is_its_outcome_not_the_end_of_the_others():
    def work(target, say):
        if target.name == "a":
            raise KeyError("boom")
        return 1

    a, b = fleet.across(_targets("a", "b"), work)
    assert a.error is not None and "internal error: KeyError" in a.error.message
    assert b.value == 1


def test_summary_across_targets_sums_each_count_into_a_total():
    def result(table, queued, processing, expired, ready, oldest, review, estimated=()):
        return {
            "table": table,
            "status": {"queued": queued, "processing": processing, "done": 0, "failed": 0},
            "estimated": list(estimated),
            "processing": {
                "live": processing - expired,
                "expiring_soon": 0,
                "expired": expired,
                "no_lease": 0,
            },
            "ready": ready,
            "oldest_ready_s": oldest,
            "awaiting_review": review,
        }

    found = summary.rows(
        [
            ("orders", result("public.jobs", 5, 4, 3, 5, 12.0, 1)),
            ("billing", result("billing.jobs", 2, 2, 2, 0, None, 0, ["done"])),
        ]
    )
    total = found[-1]
    assert [r["target"] for r in found] == ["orders", "billing", "total"]
    assert (total["queued"], total["processing"], total["expired"]) == (7, 6, 5)
    assert (total["ready"], total["oldest_ready_s"], total["awaiting_review"]) == (5, 12.0, 1)
    assert total["estimated"] == "done" and total["table"] is None


def test_metrics_across_targets_is_one_valid_exposition_with_a_target_label():
    figures = {
        "stuck_auto": 2,
        "stuck_manual": 1,
        "oldest_expired_s": 30.0,
        "live": 4,
        "no_lease": 0,
        "expiring_soon": 1,
        "reclaims": 0,
        "awaiting": 0,
        "awaiting_review": 1,
        "ready": 3,
        "oldest_ready_s": 2.0,
        "expiring_within_s": 30.0,
        "reclaim_window_s": 300.0,
        "replica_lag_s": 0.0,
        "standby": 0,
    }
    text = openmetrics.exposition_across(
        [("orders", ("public.jobs", figures)), ('we"ird', ("b.jobs", figures))],
        {"orders": True, 'we"ird': True, "down": False},
    )
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    up = {s.labels["target"]: s.value for s in families["jobctl_target_up"].samples}
    assert up == {"orders": 1, 'we"ird': 1, "down": 0}
    stuck = families["jobctl_stuck_jobs"].samples
    assert {(s.labels["target"], s.labels["policy"], s.value) for s in stuck} == {
        ("orders", "auto", 2),
        ("orders", "manual", 1),
        ('we"ird', "auto", 2),
        ('we"ird', "manual", 1),
    }
    assert text.count("# TYPE jobctl_stuck_jobs") == 1  # one family, every target's samples
