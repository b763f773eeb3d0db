"""Where and how jobctl connects (jobctl/db/settings.py): which DSN wins, the timeouts'
floor, who acts."""

from __future__ import annotations

import datetime as dt

import pytest

from jobctl import errors
from jobctl.db.settings import Settings, default_actor


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("JOBCTL_DSN", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_dsn_given_then_jobctls_variable_then_database_url(environment):
    assert Settings().resolved_dsn() == ""  # libpq's own PG* variables then
    environment.setenv("DATABASE_URL", "postgresql:///app")
    assert Settings().resolved_dsn() == "postgresql:///app"
    environment.setenv("JOBCTL_DSN", "dbname=jobs")
    assert Settings().resolved_dsn() == "dbname=jobs"
    assert Settings(dsn="dbname=given").resolved_dsn() == "dbname=given"


def test_a_targets_dsn_is_its_own_never_the_environments(environment):
    environment.setenv("JOBCTL_DSN", "dbname=someone_elses")
    assert Settings(target="orders").resolved_dsn() == ""
    assert Settings(target="orders", dsn="dbname=orders").resolved_dsn() == "dbname=orders"


@pytest.mark.parametrize("name", ["statement_timeout", "lock_timeout"])
def test_a_timeout_under_a_millisecond_is_refused_as_no_timeout_would_be(name):
    with pytest.raises(errors.UsageError, match=f"{name} must be 1ms at least"):
        Settings(**{name: dt.timedelta(microseconds=500)})
    assert getattr(Settings(**{name: dt.timedelta(milliseconds=1)}), name).microseconds == 1000


def test_who_acts_is_user_at_host():
    user, _, host = default_actor().partition("@")
    assert user and host
    assert Settings(actor="alice@oncall").actor == "alice@oncall"
