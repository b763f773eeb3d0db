"""Rows streamed to a terminal (``screen.streamed``, ``output``'s streamed screen, ``stuck`` on a
terminal): the first screen as soon as its rows are read, the rest in its columns and widths;
no more rows than the first chunk: the table a list of them makes, byte for byte."""

from __future__ import annotations

import datetime as dt
import io
import uuid

import pytest

from jobctl.render import output, rows, screen, streamed, views

WHEN = dt.datetime(2026, 1, 1, 5, 51, 47, tzinfo=dt.timezone.utc)


def row(n: int, **changed: object) -> dict[str, object]:
    found = {
        "id": 100_000 + n,
        "reserved_by": f"worker-{n % 40}",
        "recovery_policy": "manual" if n % 5 == 0 else "auto",
        "effective_policy": "manual" if n % 5 == 0 else "auto",
        "attempts": 1,
        "max_attempts": 3,
        "reclaim_count": 0,
        "lease_expires_at": WHEN,
        "lease_overdue_s": 60.0 + n,
        "heartbeat_age_s": 90.0,
        "action": "fail" if n % 5 == 0 else "requeue",
        "lease_state": "expired",
        "claimed_age_s": 600.0,
        "skipped": None,
        "reserved_at": WHEN,
        "attempt_token": uuid.UUID(int=n),
    }
    return {**found, **changed}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def shown(doc: output.Document, width: int, out: output.Output = output.Output.table) -> str:
    stream = Terminal()
    output.render(doc, out, None, stream, output.Screen(columns=width, colour=True))
    return stream.getvalue()


@pytest.mark.parametrize("count", [0, 1, 7, screen.FIRST_ROWS])
@pytest.mark.parametrize("width", [40, 80, 120])
@pytest.mark.parametrize("at_risk", [False, True])
def test_no_more_rows_than_the_first_chunk_show_as_a_list_of_them_does(count, width, at_risk):
    found = [row(n, skipped="pid 7" if n == 3 else None) for n in range(count)]
    if at_risk and found:
        found[-1] = {**found[-1], "lease_state": "expiring", "worker_heartbeat_lag_s": 1.0}
    columns = rows.AT_RISK_COLUMNS if at_risk else rows.STUCK_COLUMNS
    as_list = views.stuck(found, columns, at_risk=at_risk)
    as_they_come = streamed.stuck(iter(found), columns, at_risk=at_risk)
    assert shown(as_they_come, width) == shown(as_list, width)


@pytest.mark.parametrize("width", [40, 80, 120])
def test_uniform_rows_past_the_first_chunk_show_as_one_table(width):
    found = [row(n) for n in range(screen.FIRST_ROWS + 2 * screen.CHUNK_ROWS + 3)]
    as_list = views.stuck(found, rows.STUCK_COLUMNS)
    as_they_come = streamed.stuck(iter(found), rows.STUCK_COLUMNS)
    assert shown(as_they_come, width) == shown(as_list, width)


def plain(doc: output.Document, width: int) -> list[str]:
    stream = Terminal()
    output.render(doc, output.Output.table, None, stream, output.Screen(width, colour=False))
    return stream.getvalue().splitlines()


def test_the_first_chunk_is_laid_out_before_the_rest_is_read():
    read = 0

    def counted():
        nonlocal read
        for n in range(10_000):
            read += 1
            yield row(n)

    layouts = screen.streamed(views.STUCK_VIEW, counted(), 80, output.cell)
    first = next(layouts)
    assert len(first.cells) == screen.FIRST_ROWS and read == screen.FIRST_ROWS
    second = next(layouts)
    assert not second.headed and second.widths == first.widths
    assert read == screen.FIRST_ROWS + screen.CHUNK_ROWS


def test_a_wider_worker_later_widens_its_column_under_a_header_of_its_own():
    wide = "a-much-longer-worker-name.example"
    found = [row(n) for n in range(screen.FIRST_ROWS)]
    found += [row(screen.FIRST_ROWS, reserved_by=wide)]
    lines = plain(streamed.stuck(iter(found), rows.STUCK_COLUMNS), 120)
    headers = [n for n, line in enumerate(lines) if line.startswith("ID ")]
    assert headers == [0, screen.FIRST_ROWS + 1]  # the rows above kept, a header for the rest
    header, last = lines[-3:-1]  # and the note of the columns -o wide adds
    assert wide in last  # never cut: a worker is whole
    assert header.index("WORKER") < header.index("POLICY") == last.index("manual")


def test_a_row_locked_later_brings_its_skipped_column():
    found = [row(n) for n in range(screen.FIRST_ROWS + 5)]
    found[-1] = {**found[-1], "skipped": "locked by pid 4242"}
    lines = plain(streamed.stuck(iter(found), rows.STUCK_COLUMNS), 120)
    assert "SKIPPED" not in lines[0]
    assert "SKIPPED" in lines[screen.FIRST_ROWS + 1] and "pid 4242" in lines[-2]


def test_wide_streams_too_and_widens_what_it_never_cuts():
    found = [row(n) for n in range(screen.FIRST_ROWS)]
    found += [row(1, reserved_by="w" * 50)]
    stream = Terminal()
    doc = streamed.stuck(iter(found), rows.STUCK_COLUMNS)
    output.render(doc, output.Output.wide, None, stream, output.Screen(80, colour=False))
    assert "TOKEN" in stream.getvalue().splitlines()[0] and "w" * 50 in stream.getvalue()


def test_at_risk_note_once_a_live_lease_came():
    found = [row(n) for n in range(screen.FIRST_ROWS + 3)]
    found[-1] = {**found[-1], "lease_state": "expiring"}
    lines = plain(streamed.stuck(iter(found), rows.AT_RISK_COLUMNS, at_risk=True), 120)
    assert views.AT_RISK_NOTE in lines


def test_many_jobs_with_no_lease_below_leases_are_counted_not_listed():
    def of(state: str, n: int) -> list[dict[str, object]]:
        return [{"id": n + i, "lease_state": state} for i in range(n)]

    collapsed = streamed.Collapsed()
    listed = list(streamed.beside_leases(iter(of("expired", 4) + of("none", 40)), collapsed))
    assert [r["lease_state"] for r in listed] == ["expired"] * 4 and collapsed.count == 40
    # at most NO_LEASE_LISTED below leases: listed, in order
    collapsed = streamed.Collapsed()
    few = of("expired", 4) + of("none", streamed.NO_LEASE_LISTED)
    assert list(streamed.beside_leases(iter(few), collapsed)) == few and not collapsed.count
    # no lease above them: every one listed (nothing to push off the screen)
    collapsed = streamed.Collapsed()
    alone = of("none", 40)
    assert list(streamed.beside_leases(iter(alone), collapsed)) == alone and not collapsed.count
    # expiring leases (--expiring-within) count as leases
    collapsed = streamed.Collapsed()
    risky = of("expiring", 2) + of("none", 11)
    assert len(list(streamed.beside_leases(iter(risky), collapsed))) == 2
    assert collapsed.count == 11
