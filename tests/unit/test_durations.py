"""Durations as operators type them, and the DURATION parameter type of the CLI."""

from __future__ import annotations

import datetime as dt

import hypothesis
import pytest
from hypothesis import strategies as st

from jobctl import durations
from jobctl.cli import main as cli
from jobctl.cli import parameters


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("1h", 3600),
        ("1.5s", 1.5),
        ("90", 90),
        ("250ms", 0.25),
        # every form jobctl prints is accepted back
        ("1m36s", 96),
        ("21m17s", 1277),
        ("2h1m", 7260),
        ("2h30m", 9000),
        ("1h5m10s", 3910),
        ("90s", 90),
        ("1.5h", 5400),
        ("3d4h", 273600),
        ("1h 30m", 5400),
        ("0.4s", 0.4),
    ],
)
def test_durations(text, seconds):
    assert durations.parse(text).total_seconds() == seconds


@pytest.mark.parametrize(
    "text", ["", "5 minutes", "-1s", "1y", "1e9", "99999999d", "5m1h", "1m1m", "1h5", "m", "1ms5s"]
)
def test_bad_durations(text):
    with pytest.raises(durations.InvalidDuration):
        durations.parse(text)


MS = dt.timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("duration", "whole_ms", "decimal_s"),
    [
        (parameters.TIMEOUT_FLOOR[0], "1ms", "0.001s"),  # the floors, in whole milliseconds
        (parameters.SERVICE_FLOOR[0], "100ms", "0.1s"),
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


@hypothesis.given(st.floats(min_value=-(10**8), max_value=10**8, allow_nan=False))
def test_what_a_terminal_shows_parses_back(seconds):
    """durations.human's text (tables, summary, report, explain) is typed back to the same
    duration, to its last unit (0.1s under 10s, else whole seconds, minutes or hours)."""
    text = durations.human(seconds)
    back = durations.parse(text.lstrip("-")).total_seconds() * (-1 if text[0] == "-" else 1)
    total = abs(seconds)
    # the text's last unit bounds what it leaves out: tenths under 10s, then seconds
    # rounded; 2h5m leaves the seconds out, 3d4h the minutes
    unit = {"s": 0.05 if "." in text else 0.5, "m": 60, "h": 3600, "d": 3600}[text[-1]]
    assert abs(abs(back) - total) <= unit + 1e-6


@hypothesis.given(st.integers(min_value=0, max_value=3650 * 86_400_000))
def test_show_round_trips(ms):
    duration = dt.timedelta(milliseconds=ms)
    assert durations.parse(durations.show(duration)) == duration
    assert durations.parse(durations.show(duration, decimal_seconds=True)) == duration


@pytest.mark.parametrize("text", ["1m36s", "2h30m", "1h5m10s", "90s", "1.5h"])
def test_events_since_takes_what_jobctl_prints(text):
    from jobctl.ops import events

    assert events.bound(text) == durations.parse(text)


def test_summary_on_a_terminal_shows_durations_as_everywhere():
    """summary's waiting section: ``OLDEST READY 1m45s``, not ``OLDEST READY S 104.7``;
    JSON keeps the seconds."""
    import io

    from jobctl.render import output, views

    result = {
        "status": {"queued": 3},
        "estimated": [],
        "processing": {"leased": 0},
        "ready": 3,
        "oldest_ready_s": 104.7,
        "awaiting_review": 0,
        "workers": [],
    }
    stream = io.StringIO()
    output.render(
        views.summary(result), output.Output.table, None, stream, output.Screen(80, False)
    )
    text = stream.getvalue()
    assert "OLDEST READY S" not in text and "104.7" not in text
    assert "OLDEST READY" in text and "1m45s" in text
    stream = io.StringIO()
    output.render(views.summary(result), output.Output.json, None, stream)
    assert '"oldest_ready_s": 104.7' in stream.getvalue()


def test_the_report_and_explain_say_durations_as_a_terminal_does():
    from jobctl.render import markdown, story

    assert markdown._seconds(222.0) == "3m42s"  # was "3.7 min"
    assert markdown._seconds(23.8) == "24s"  # was "23.8 s"
    assert story._s(27.0) == "27s"
