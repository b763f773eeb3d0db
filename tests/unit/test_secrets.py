"""Passwords never leave jobctl: every spelling of a DSN, and a traceback's text."""

from __future__ import annotations

import pytest

from jobctl import db


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://app:s3cr3t@db.internal:5432/jobs", "s3cr3t"),
        ("postgres://app:p%40ss@db/jobs", "p%40ss"),
        ("host=db user=app password=s3cr3t dbname=jobs", "s3cr3t"),
        ("host=db password = 'with space' dbname=jobs", "with space"),
        ("host=db password='unterminated dbname=jobs", "unterminated"),
    ],
)
def test_redact_hides_the_password(dsn, secret):
    message = f"could not connect using {dsn}: timeout"
    assert secret not in db.redact(message, dsn)
    assert secret not in db.redact(message)  # even without knowing the DSN
    assert "***" in db.redact(message, dsn)


def test_redact_also_hides_the_dsns_password_where_it_stands_alone():
    dsn = "host=db password=hunter2"
    assert db.redact("auth failed for hunter2", dsn) == "auth failed for ***"


def test_redact_leaves_other_text_alone():
    assert db.redact("relation jobs does not exist") == "relation jobs does not exist"
