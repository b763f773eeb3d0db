"""Durations as operators type them, and the DURATION parameter type of the CLI."""

from __future__ import annotations

import pytest

from jobctl import durations
from jobctl.cli import main as cli


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h", 3600), ("1.5s", 1.5), ("90", 90), ("250ms", 0.25)],
)
def test_durations(text, seconds):
    assert durations.parse(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-1s", "1y", "1e9", "99999999d"])
def test_bad_durations(text):
    with pytest.raises(durations.InvalidDuration):
        durations.parse(text)


@pytest.mark.parametrize(
    "args",
    [
        ["stuck", "--grace", "5 minutes"],
        ["--lock-timeout", "forever", "stuck"],
        ["summary", "--every", "never"],
        ["reclaim", "--every", "1y"],
    ],
)
def test_a_bad_duration_is_refused_before_connecting(args, capsys, monkeypatch):
    """The parameter type refuses it while parsing: exit 2, one line, no database needed."""
    monkeypatch.setenv("JOBCTL_DSN", "host=/nonexistent/socket/dir")  # never reached
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a duration" in err and err.startswith("jobctl: ")
