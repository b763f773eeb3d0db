"""Durations as operators type them, and the DURATION parameter type of the CLI."""

from __future__ import annotations

import datetime as dt

import pytest

from jobctl import durations
from jobctl.cli import main as cli
from jobctl.cli import options


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


MS = dt.timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("duration", "whole_ms", "decimal_s"),
    [
        (options.TIMEOUT_FLOOR[0], "1ms", "0.001s"),  # the floors, in whole milliseconds
        (options.SERVICE_FLOOR[0], "100ms", "0.1s"),
        (1500 * MS, "1500ms", "1.5s"),
        (dt.timedelta(0), "0ms", "0s"),
        (dt.timedelta(seconds=30), "30s", "30s"),
        (dt.timedelta(seconds=90), "90s", "90s"),
        (dt.timedelta(minutes=30), "30m", "30m"),  # stuck's --ready-after, in decimal seconds
        (dt.timedelta(minutes=90), "90m", "90m"),
        (dt.timedelta(hours=2), "2h", "2h"),
        (dt.timedelta(days=1), "1d", "24h"),
        (dt.timedelta(seconds=3661.5), "3661500ms", "3661.5s"),
        (dt.timedelta(microseconds=400), "0ms", "0.0004s"),
    ],
)
def test_show(duration, whole_ms, decimal_s):
    """The one formatter in its two modes; each mode's text parses back to the duration."""
    assert durations.show(duration) == whole_ms
    assert durations.show(duration, decimal_seconds=True) == decimal_s
    assert durations.parse(whole_ms) == dt.timedelta(milliseconds=round(duration / MS))
    assert durations.parse(decimal_s) == duration


def test_a_floor_is_named_in_whole_milliseconds(capsys, monkeypatch):
    monkeypatch.setenv("JOBCTL_DSN", "host=/nonexistent/socket/dir")  # never reached
    assert cli.main(["summary", "--watch", "--every", "0.05s"]) == 2
    assert "is shorter than 100ms, the least accepted" in capsys.readouterr().err


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
