"""The renderer, without a database."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid

import pytest
import rendered

from jobctl.render import output

ROWS = [
    {
        "id": "1e3",
        "worker": "[bold]w1[/bold]",
        "at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
        "token": uuid.UUID(int=1),
        "note": "tab\there\x1b[31m",
        "age_s": 1.25,
        "ok": True,
    }
]


def render(fmt: output.Output, tablefmt: str | None = None, tty: bool = False) -> str:
    stream = io.StringIO()
    stream.isatty = lambda: tty  # type: ignore[method-assign]
    output.render(output.Document(ROWS, [output.Section(None, ROWS)]), fmt, tablefmt, stream)
    return stream.getvalue()


def test_table_keeps_ids_as_text_and_strips_escapes():
    text = render(output.Output.table)
    assert "1e3" in text and "1000" not in text
    assert "\x1b" not in text and "\\x1b[31m" in text
    assert "[bold]w1[/bold]" in text
    assert "2026-01-02 03:04:05+00:00" in text


def test_rich_table_on_a_terminal_escapes_markup(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    text = render(output.Output.table, tty=True)
    assert "[bold]" in text and "\x1b[31m" not in text  # markup shown, escape not obeyed
    monkeypatch.setenv("NO_COLOR", "1")
    assert "─" not in render(output.Output.table, tty=True)


def test_json_contract_types():
    (row,) = json.loads(render(output.Output.json))
    assert row["at"] == "2026-01-02T03:04:05+00:00"
    assert row["token"] == "00000000-0000-0000-0000-000000000001"
    assert row["age_s"] == 1.25 and row["note"] == "tab\there\x1b[31m"


def test_csv_and_tsv_quote_delimiters():
    assert render(output.Output.csv).splitlines()[0] == "id,worker,at,token,note,age_s,ok"
    tsv = render(output.Output.tsv).splitlines()
    assert len(tsv) == 2 and "\ttab\\there\x1b[31m\t" in tsv[1]  # COPY's escape, not quotes


def copy_text_fields(line: str) -> list[str]:
    """A line of PostgreSQL's COPY text format read back: split on tabs, then unescaped."""
    unescape = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
    fields = []
    for raw in line.split("\t"):
        text, i = [], 0
        while i < len(raw):
            if raw[i] == "\\":
                text.append(unescape[raw[i + 1]])
                i += 2
            else:
                text.append(raw[i])
                i += 1
        fields.append("".join(text))
    return fields


HOSTILE = 'a\tb\nc\r\nd\\t "q", e\\'  # a tab, newlines, a CR, backslashes, quotes, a comma


@pytest.mark.parametrize("streamed", [False, True])
def test_tsv_escapes_as_copy_text_and_reads_back(streamed):
    rows = [{"id": 1, "worker": HOSTILE, "n": None}, {"id": 2, "worker": "plain", "n": 3}]
    stream = io.StringIO()
    payload = iter(rows) if streamed else rows
    section = output.Section(
        None, iter(rows) if streamed else rows, ["id"], keys=["id", "worker", "n"]
    )
    output.render(output.Document(payload, [section]), output.Output.tsv, None, stream)
    lines = stream.getvalue().split("\n")
    assert lines[-1] == "" and len(lines) == 4  # one line per row: no line end inside a field
    table = [copy_text_fields(line) for line in lines[:-1]]
    assert {len(fields) for fields in table} == {3}  # every row the header's count of fields
    assert table[0] == ["id", "worker", "n"]  # every key JSON carries, in its order
    assert table[1] == ["1", HOSTILE, ""] and table[2] == ["2", "plain", "3"]


def test_csv_carries_every_json_key_in_order():
    rows = [{"id": 1, "worker": HOSTILE, "extra": {"k": [1]}}]
    stream = io.StringIO()
    keys = ["id", "worker", "extra"]
    doc = output.Document(rows, [output.Section(None, rows, ["id", "worker"], keys=keys)])
    output.render(doc, output.Output.csv, None, stream)
    import csv

    table = list(csv.reader(io.StringIO(stream.getvalue(), newline="")))
    assert table == [["id", "worker", "extra"], ["1", HOSTILE, '{"k": [1]}']]
    assert table[0] == list(json.loads(render_json(rows))[0])


@pytest.mark.parametrize("fmt", [output.Output.csv, output.Output.tsv])
@pytest.mark.parametrize("streamed", [False, True])
def test_the_header_is_the_declared_keys_with_no_row_and_with_many(fmt, streamed):
    """The header is the section's keys, never its rows': a row that lacks a key (or the
    first row's order) changes nothing, and no row gives the same first line."""
    keys = ["id", "kind", "worker", "applied"]
    many = [{"id": 2, "worker": "w", "applied": True}, {"applied": False, "id": 3, "kind": "k"}]

    def first_lines(found):
        stream = io.StringIO()
        rows_ = iter(found) if streamed else found
        doc = output.Document(rows_, [output.Section(None, rows_, ["id"], keys=keys)])
        output.render(doc, fmt, None, stream)
        return stream.getvalue().splitlines()

    empty, full = first_lines([]), first_lines(many)
    delimiter = "," if fmt is output.Output.csv else "\t"
    assert empty == [delimiter.join(keys)] and full[0] == empty[0]
    assert full[1:] == [
        delimiter.join(["2", "", "w", "true"]),
        delimiter.join(["3", "k", "", "false"]),
    ]


@pytest.mark.parametrize("fmt", [output.Output.csv, output.Output.tsv])
def test_booleans_as_json_text_nulls_empty(fmt):
    rows = [{"a": True, "b": False, "c": None, "d": 1, "e": [True, None]}]
    stream = io.StringIO()
    output.render(output.Document(rows, [output.Section(None, rows)]), fmt, None, stream)
    import csv

    delimiter = "," if fmt is output.Output.csv else "\t"
    table = list(csv.reader(io.StringIO(stream.getvalue(), newline=""), delimiter=delimiter))
    assert table[1] == ["true", "false", "", "1", "[true, null]"]


def test_several_sections_are_one_table_with_a_section_column():
    one = output.Section("first", [{"a": 1}], keys=["a", "b"], name="one")
    two = output.Section("second", [], keys=["c"], name="two")
    three = output.Section("third", [{"b": True, "c": 2}], keys=["b", "c"])
    stream = io.StringIO()
    output.render(output.Document({}, [one, two, three]), output.Output.csv, None, stream)
    assert stream.getvalue().splitlines() == ["section,a,b,c", "one,1,,", "third,,true,2"]


def render_json(rows):
    stream = io.StringIO()
    output.render(output.Document(rows, []), output.Output.json, None, stream)
    return stream.getvalue()


def test_an_empty_tsv_is_its_header():
    stream = io.StringIO()
    with output.delimited_rows(stream, ["a", "b"], "\t") as write:
        write([])
    assert stream.getvalue() == "a\tb\n"


def test_any_tabulate_format():
    assert render(output.Output.table, "github").startswith("| id")


@pytest.mark.parametrize("count", [0, 1, 3])
def test_streamed_json_is_the_same_json(count):
    rows = [dict(ROWS[0], id=str(i)) for i in range(count)]
    streamed, whole = io.StringIO(), io.StringIO()
    output.render(output.Document(iter(rows), []), output.Output.json, None, streamed)
    output.render(output.Document(rows, []), output.Output.json, None, whole)
    assert streamed.getvalue() == whole.getvalue()


def test_json_lines_are_json_dumps_byte_for_byte():
    values = [
        dict(ROWS[0], nested=[1, {"d": dt.date(2026, 1, 2)}], nan=float("nan"), none=None),
        "é\u2028",
        3,
        None,
    ]
    expected = "".join(  # strict JSON: the NaN as the string "NaN"
        json.dumps(
            output._finite(v), default=output._json_default, ensure_ascii=False, allow_nan=False
        )
        + "\n"
        for v in values
    )
    assert '"nan": "NaN"' in expected
    assert output.json_lines(values) == expected
    assert output.to_json(values[0]) + "\n" == expected.splitlines(keepends=True)[0]


@pytest.mark.parametrize("count", [0, 1, 501, 1001])
def test_streamed_jsonl_is_written_in_chunks_and_is_the_same(count):
    rows = [dict(ROWS[0], id=i) for i in range(count)]
    streamed, whole = io.StringIO(), io.StringIO()
    writes: list[str] = []
    streamed.write = lambda text: writes.append(text) or len(text)  # type: ignore[method-assign]
    output.render(output.Document(iter(rows), []), output.Output.jsonl, None, streamed)
    output.render(output.Document(rows, []), output.Output.jsonl, None, whole)
    assert "".join(writes) == whole.getvalue()
    assert len(writes) == -(-count // output.JSONL_CHUNK)  # a write per chunk, not per row


def test_behind_writes_in_order_and_everything_handed_over():
    from jobctl.cli import terminal

    written: list[int] = []
    with terminal.behind(written.append) as hand_over:
        for i in range(100):
            hand_over(i)
    assert written == list(range(100))
    written.clear()
    with pytest.raises(KeyError), terminal.behind(written.append) as hand_over:
        hand_over(1)
        hand_over(2)
        raise KeyError("the caller's own error")  # batches 1 and 2 were committed: printed
    assert written == [1, 2]


def test_behind_raises_the_writers_error_in_the_caller():
    from jobctl.cli import terminal

    def write(item: int) -> None:
        if item == 3:
            raise BrokenPipeError
        written.append(item)

    written: list[int] = []
    with pytest.raises(BrokenPipeError), terminal.behind(write) as hand_over:
        for i in range(1000):
            hand_over(i)  # raises at the next hand-over once the writer failed
    assert written == [0, 1, 2]


@pytest.mark.parametrize("before", [0, 1, 3, output.JSONL_CHUNK + 1])
def test_a_json_document_a_failure_cuts_short_is_never_valid(before):
    """Rows streamed as one JSON array, then the statement fails (a
    row it cannot read, a timeout): nothing on stdout, or an unclosed array, never ``[]``
    or a shorter valid array that a script would read as the whole answer."""

    def rows():
        for i in range(before):
            yield {"id": i}
        raise RuntimeError("the statement failed")

    stream = io.StringIO()
    doc = output.Document(rows(), [])
    with pytest.raises(RuntimeError):
        output.render(doc, output.Output.json, None, stream)
    written = stream.getvalue()
    if written:
        with pytest.raises(json.JSONDecodeError):
            json.loads(written)
    assert not written.rstrip().endswith("]")


def test_a_json_array_is_closed_when_its_body_ends():
    stream = io.StringIO()
    with output.json_array(stream) as write:
        write([{"a": 1}])
    assert json.loads(stream.getvalue()) == [{"a": 1}]
    empty = io.StringIO()
    with output.json_array(empty):
        pass
    assert json.loads(empty.getvalue()) == []


@pytest.mark.parametrize(
    "text",
    [
        "`code` ``x`` and a trailing \\",
        "`",
        " padded ",
        "   ",
        "a\\|b|c",
        "web-9 | mallory@ops.example | postgres | customer approved",
        '<img src="https://attacker.example/p.png"> [Approve](https://attacker.example) **X**',
        "</td></tr></table><h1>Fake</h1> &lt;b&gt; ~~gone~~ www.attacker.example @team #12",
    ],
)
def test_markdown_code_reads_back_exactly_in_a_table_and_a_sentence(text):
    """Rendered by CommonMark and GitHub's parser, a code span holds the text exactly (made
    visible), in one table cell or inside a sentence, and nothing else comes of it."""
    cell = output.markdown_code(text)
    page = rendered.render(f"| a | b |\n|---|---|\n| {cell} | x |\n")
    assert page.cells == [[["a", "b"], [text, "x"]]]
    assert page.code == [text]
    said = rendered.render(f"It said {output.markdown_code(text, in_table=False)} here.")
    assert said.code == [text] and said.tags == ["p", "code"]
    assert not rendered.FORBIDDEN_TOKENS & set(page.tokens + said.tokens)


def test_markdown_code_of_nothing_and_of_a_newline():
    assert output.markdown_code("") == ""
    assert output.markdown_code("a\nb") == "`a\\nb`"  # one line, shown as safe_text shows it


@pytest.mark.parametrize("fmt", sorted(output.MARKDOWN_FORMATS))
def test_markdown_table_formats_keep_every_value_in_its_column(fmt):
    """tabulate's github and pipe formats: a value with pipes and markup stays one cell, as
    code; numbers and times stay as jobctl writes them."""
    rows = [
        {
            "id": 7,
            "worker": "web-9 | mallory@ops | postgres | customer approved",
            "at": ROWS[0]["at"],
        },
        {"id": 8, "worker": "<h1>x</h1>", "at": None},
    ]
    text = output.format_tables([output.Section(None, rows)], fmt)
    page = rendered.render(text)
    assert page.cells == [
        [
            ["id", "worker", "at"],
            ["7", rows[0]["worker"], "2026-01-02 03:04:05+00:00"],
            ["8", "<h1>x</h1>", ""],
        ]
    ]
    assert "h1" not in page.tags and "a" not in page.tags


@pytest.mark.parametrize("fmt", sorted(output.UNESCAPED_MARKUP_FORMATS))
def test_markup_formats_that_do_not_escape_row_text_are_refused(fmt):
    """A worker name in mediawiki or jira markup adds a link or a column."""
    from jobctl import errors
    from jobctl.cli import terminal

    with pytest.raises(errors.UsageError, match="unescaped"):
        terminal.emit(output.Document([], []), output.Output("table"), fmt)
