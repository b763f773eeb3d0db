"""Terminal tables (jobctl/render/screen.py), without a database: columns by priority as the width
allows, nothing wrapped, ids/workers/actions whole, tokens never cut, durations as read."""

from __future__ import annotations

import datetime as dt
import io
import uuid

import pytest

from jobctl.render import output, screen, views

NOW = dt.datetime.now(dt.timezone.utc)
ROW = {
    "id": 12345,
    "status": "processing",
    "reserved_by": "api-worker-1.prod.internal",
    "attempt_token": uuid.UUID(int=7),
    "attempts": 1,
    "max_attempts": 3,
    "reclaim_count": 0,
    "recovery_policy": "manual",
    "reserved_at": NOW,
    "heartbeat_at": NOW,
    "lease_expires_at": NOW,
    "lease_overdue_s": 320.4,
    "heartbeat_age_s": 340.0,
    "action": "fail",
    "skipped": None,
}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.4, "0.4s"),
        (3, "3s"),
        (48.2, "48s"),
        (320, "5m20s"),
        (300, "5m"),
        (7200, "2h"),
        (7500, "2h5m"),
        (90000, "1d1h"),
        (-19.7, "-20s"),
        (None, ""),
    ],
)
def test_durations_as_people_read_them(value, text):
    assert screen.seconds(value) == text


def rendered(width: int | None, rows=(ROW,), view=views.STUCK_VIEW) -> list[str]:
    grid = screen.layout(view, list(rows), width, output.cell)
    return [text for text, _ in grid.lines()]


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_stuck_fits_the_width_with_the_essentials_whole(width):
    lines = rendered(width)
    assert all(len(line) <= width for line in lines)
    header, row = lines
    for essential in ("ID", "WORKER", "POLICY", "OVERDUE", "HEARTBEAT", "ACTION"):
        assert essential in header.split()
    assert "12345" in row and "api-worker-1.prod.internal" in row and "fail" in row
    assert "5m20s" in row and "5m40s ago" in row


def test_more_columns_as_the_width_allows_and_wide_shows_all():
    narrow, wide = rendered(80)[0], rendered(200)[0]
    assert "RECLAIMS" not in narrow and "RECLAIMS" in wide and "TOKEN" in wide
    assert set(rendered(None)[0].split()) >= set(wide.split())
    grid = screen.layout(views.STUCK_VIEW, [ROW], 80, output.cell)
    assert [c.header for c in grid.hidden][:2] == ["RECLAIMS", "EXPIRED AT"]


def test_only_what_cannot_fit_is_cut_and_a_token_never():
    attempt = {"attempt": 1, "worker": "w" * 60, "attempt_token": uuid.UUID(int=7)}
    lines = rendered(60, [attempt], views.ATTEMPT_VIEW)
    assert all(len(line) <= 60 for line in lines)
    assert str(uuid.UUID(int=7)) in lines[1]  # the token whole
    assert "…" in lines[1]  # the worker cut, with an ellipsis, not wrapped


def test_watch_fits_the_height_and_counts_what_it_hides():
    rows = [{**ROW, "id": n} for n in range(40)]
    group = output.screen_group(
        [output.Section(None, rows, None, views.STUCK_VIEW)], width=80, height=24, title="t"
    )
    stream = io.StringIO()
    from rich.console import Console

    Console(file=stream, width=80, color_system=None).print(group)
    lines = stream.getvalue().splitlines()
    assert len(lines) <= 23
    shown = sum(1 for line in lines if "api-worker" in line)
    assert f"… {40 - shown} more row(s) not shown" in stream.getvalue()


def test_watch_of_several_sections_fits_the_height_with_their_blank_lines():
    """A summary's four sections, or the lines the targets said above the stuck jobs of
    several: every section and blank line counted, the cursor's line left free."""
    rows = [{**ROW, "id": n, "target": "orders"} for n in range(40)]
    doc = views.with_target_lines(
        views.across_targets(views.stuck(rows, ["id", "reserved_by"])),
        [("down", "error: cannot connect: " + "refused " * 20)],
    )
    small = [output.Section(f"s{n}", [{"a": n}], ["a"]) for n in range(3)]
    several = [*small, output.Section("big", rows, None, views.STUCK_VIEW)]
    for targets, sections in ((True, doc.sections), (False, several)):
        group = output.screen_group(sections, width=80, height=24, title="t")
        stream = io.StringIO()
        from rich.console import Console

        Console(file=stream, width=80, color_system=None).print(group)
        lines = stream.getvalue().splitlines()
        assert len(lines) <= 23, "\n".join(lines)
        assert lines[0] == "t"
        assert "more row(s) not shown" in lines[-2] + lines[-1]
        if targets:  # the down target's line survives the cut, above the rows
            down = [n for n, line in enumerate(lines) if line.startswith("down ")]
            assert down and down[0] < next(n for n, x in enumerate(lines) if "api-worker" in x)


def test_watch_keeps_the_cursor_on_a_line_of_its_own():
    """A Ctrl-C echoed as ^C after a last line as wide as the screen would wrap, and Live's
    last refresh land a line low (a title twice on the screen): the last line is empty."""
    from rich.console import Console

    said = [("down", "error: " + "x" * 200)]  # the last line fills the width
    doc = views.with_target_lines(output.Document([], []), said)
    stream = io.StringIO()
    Console(file=stream, width=80, color_system=None).print(
        output.rich_group(doc.sections, columns=80, lines=24)
    )
    lines = stream.getvalue().split("\n")
    assert lines[-2:] == ["", ""] and len(lines[-3]) == 80


def test_piped_table_is_unchanged():
    """Off a terminal, -o table is tabulate's plain table of the columns: the contract."""
    stream = io.StringIO()
    doc = views.stuck([ROW], ["id", "reserved_by", "lease_overdue_s", "action"])
    output.render(doc, output.Output.table, None, stream)
    assert stream.getvalue().splitlines()[0].split() == [
        "id",
        "reserved_by",
        "lease_overdue_s",
        "action",
    ]
    assert "320.4" in stream.getvalue()


def test_the_captured_screens_fit_their_width():
    """docs/reference/screens.md (captured by tests/screens.py): at 80 and 120 columns no line is
    wider, but -o wide's (every column, by design); the README's tour has the 80 one."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "reference" / "screens.md").read_text()
    for part in text.split("\n## ")[1:]:
        width = int(part.split(" ", 1)[0])
        for block in part.split("`$ jobctl")[1:]:
            command, body = block.split("\n", 1)
            if "-o wide" in command:
                continue
            screen_text = body.split("```")[1]
            assert all(len(line) <= width for line in screen_text.splitlines()), command
    readme = (root / "README.md").read_text()
    assert "<!-- screen: stuck 80 -->\n```\n$ jobctl stuck\nID  WORKER" in readme


def test_narrow_screens_drop_optional_columns_before_cutting_the_worker():
    """Kill Bill's hosts (kb-node-1..3.billing.internal look alike once cut) with jobs claimed
    with no lease (STATE, CLAIMED, SKIPPED shown) and a policy set per kind: at 80 columns the
    worker, the policy and the state stay whole; the heartbeat, the skip reason and the
    claim's age go first, named among the columns left out."""
    from jobctl.ops import triage

    def row(n: int, state: str) -> dict:
        return {
            **ROW,
            "id": 4000 + n,
            "reserved_by": f"kb-node-{n}.billing.internal",
            "recovery_policy": "auto",
            "effective_policy": "manual",
            "policy_from": "kind",
            "lease_state": state,
            "claimed_age_s": 900.0,
            "lease_overdue_s": None if state == "none" else 300.0,
            "action": "none" if state == "none" else "fail",
            "skipped": triage.NO_LEASE if state == "none" else None,
        }

    rows = [row(1, "expired"), row(2, "none"), row(3, "none")]
    for width in (80, 100):
        grid = screen.layout(views.STUCK_VIEW, rows, width, output.cell)
        lines = [text for text, _ in grid.lines()]
        assert all(len(line) <= width for line in lines)
        for n, line in enumerate(lines[1:], 1):
            assert f"kb-node-{n}.billing.internal" in line and "manual (kind)" in line
        assert "no lease  " in lines[2]  # the state whole (a skip reason may be cut)
        assert "kb-node-…" not in "".join(lines) and "manua…" not in "".join(lines)
    narrow = screen.layout(views.STUCK_VIEW, rows, 80, output.cell)
    assert "HEARTBEAT" in {c.header for c in narrow.hidden}
    wide = screen.layout(views.STUCK_VIEW, rows, 200, output.cell)
    assert {"STATE", "CLAIMED", "HEARTBEAT"} <= {c.header for c in wide.columns}
    # a row with no lease says so in STATE (the line under the table says what it means):
    # no SKIPPED column repeats it; a lease's row that reclaim passes by still has one
    assert "SKIPPED" not in {c.header for c in (*wide.columns, *wide.hidden)}
    locked = [*rows, {**row(4, "expired"), "skipped": "locked by pid 77 (psql)"}]
    grid = screen.layout(views.STUCK_VIEW, locked, 200, output.cell)
    texts = [text for text, _ in grid.lines()]
    assert "SKIPPED" in texts[0] and texts[-1].endswith("locked by pid 77 (psql)")
    assert not any(line.endswith("it says what to do)") for line in texts)


def test_queue_and_attempts_beside_jobs_with_no_lease_at_120_columns():
    """A Delayed::Job table's incident: 4 expired leases and lease-less rows of workers named
    like ``delayed_job host:web-old-3 pid:17001``. At 120 columns the mapped queue and the
    attempts show; no cut skip reason takes their place."""
    from jobctl.ops import triage

    def row(n: int, state: str) -> dict:
        return {
            **ROW,
            "id": n,
            "queue": "mailers" if state == "expired" else "default",
            "reserved_by": f"delayed_job host:web-old-3 pid:{17000 + n}",
            "attempts": 1,
            "max_attempts": 25,
            "lease_state": state,
            "claimed_age_s": 18000.0,
            "lease_overdue_s": None if state == "none" else 300.0,
            "action": "none" if state == "none" else "requeue",
            "skipped": triage.NO_LEASE if state == "none" else None,
        }

    found = [row(n, "expired") for n in range(1, 5)] + [row(n, "none") for n in range(5, 13)]
    grid = screen.layout(views.STUCK_VIEW, found, 120, output.cell)
    headers = [c.header for c in grid.columns]
    assert headers[:5] == ["ID", "QUEUE", "WORKER", "POLICY", "ATTEMPTS"]
    assert "SKIPPED" not in headers and "…" not in "".join(t for t, _ in grid.lines())


def test_history_drops_the_heartbeat_statistics_its_mode_never_fills():
    """The default history mode (transitions) keeps no heartbeat counts: at 120 columns
    history showed BEATS, LATE and MAX GAP empty. They show only where a row has them."""
    attempt = {
        "attempt": 1,
        "worker": "kb-node-1.billing.internal",
        "attempt_token": uuid.UUID(int=7),
        "outcome": "reclaimed",
        "claimed_at": NOW,
        "ended_at": NOW,
        "heartbeats": None,
        "late_heartbeats": None,
        "max_heartbeat_gap_s": None,
        "last_heartbeat_at": None,
    }
    header = rendered(120, [attempt], views.ATTEMPT_VIEW)[0].split()
    assert "BEATS" not in header and "LATE" not in header and "GAP" not in header
    assert "BEAT" not in header  # nor the last one
    counted = {**attempt, "heartbeats": 12, "late_heartbeats": 0, "max_heartbeat_gap_s": 0.6}
    header = rendered(120, [counted], views.ATTEMPT_VIEW)[0]
    assert "BEATS" in header and "LATE" in header and "MAX GAP" in header
