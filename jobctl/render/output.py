"""One pure renderer for every command and format: table, json, jsonl, csv, tsv.

A command hands over a ``Document``: the JSON payload (the stable contract) and the same data
as titled sections of rows for the tabular formats. Nothing here touches the database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from jobctl.contract import json_text, safe_text
from jobctl.render import delimited
from jobctl.render.screen import Column

if TYPE_CHECKING:
    from rich.console import Console, Group

Row = Mapping[str, Any]  # any row shape (see rows.py) is rendered the same way


class Output(str, enum.Enum):
    table = "table"
    wide = "wide"  # the terminal table with every column, whatever the width
    json = "json"
    jsonl = "jsonl"
    csv = "csv"
    tsv = "tsv"

    def __str__(self) -> str:
        """Its value (``json``), as typer reads a value back after ``-o``'s callback."""
        return self.value

    @property
    def tabular(self) -> bool:
        """A table for people (``table`` or ``wide``), not a machine format."""
        return self in (Output.table, Output.wide)


@dataclasses.dataclass
class Section:
    """A titled table: ``rows`` shown with ``columns`` (all keys of the first row if None).

    ``keys``: every key JSON carries of a row, in JSON's order (``rows.*_KEYS``, the row
    shape's declared keys): the header of ``-o csv``/``tsv``, the same with no row as with
    many (None: ``columns``). ``name``: what the ``section`` column says of its rows when a
    document of several sections is written as one CSV table (None: its title)."""

    title: str | None
    rows: Iterable[Row]  # a list, or rows streamed once (csv, json) from a server-side cursor
    columns: Sequence[str] | None = None
    view: Sequence[Column] | None = None  # its columns on a terminal (None: every column)
    note: str | None = None  # a line under it on a terminal (what a sign in it means)
    keys: Sequence[str] | None = None
    name: str | None = None

    def header(self) -> list[str]:
        if self.columns is not None:
            return list(self.columns)
        first = self.rows[0] if isinstance(self.rows, Sequence) and self.rows else None
        return list(first.keys()) if first is not None else []

    def fixed_header(self) -> list[str] | None:
        """The header of ``-o csv``/``tsv``: ``keys``, else ``columns``, whatever the rows;
        None for a section that declares neither, one whose rows always come (a check per
        row, a sentence per row): its first row's keys."""
        if self.keys is not None:
            return list(self.keys)
        return None if self.columns is None else list(self.columns)


@dataclasses.dataclass
class Document:
    payload: Any
    sections: list[Section]


# ---------------------------------------------------------------- JSON
# encoded in json_text; the names its callers have always found here
to_json = json_text.to_json
json_lines = json_text.json_lines
_json_default = json_text._json_default
_finite = json_text._finite


def _writer(stream: IO[str]) -> Callable[[str], object]:
    """How JSON is written to ``stream``: as it is, but on a terminal with what a JSON encoder
    leaves raw (C1 controls, bidi) escaped too (safe_text.json_text: the same JSON data)."""
    if stream.isatty():
        return lambda text: stream.write(safe_text.json_text(text))
    return stream.write


# ---------------------------------------------------------------- cells
def cell(value: Any) -> str:
    """A value as text for a table: short timestamps, seconds, and no terminal escapes,
    newlines or bidi controls (safe_text.visible)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, dict | list):
        value = to_json(value)
    return safe_text.visible(str(value))


# a jobctl command in a sentence, kept on one line: its global options as repeated (--table,
# --target: a word or a shell-quoted value), the command, then its options, ids, placeholders
# and paths
_VALUE = r"(?:'[^'\n]*'|[^\s']+)"
_COMMAND = re.compile(
    rf"jobctl(?: --(?:table|target) {_VALUE})* [a-z]+"
    r"(?: (?:-o [a-z]+|--[a-z-]+|\.\.\.|[0-9a-f-]{1,36}|[A-Z]+|[\w.~-]*/[\w./~-]*))*"
)


def prose(text: str, width: int | None) -> str:
    """A sentence for a terminal: escaped, wrapped at spaces to ``width`` (None: one line),
    continuation lines indented, a jobctl command never broken across lines."""
    import textwrap

    text = cell(text)
    if width is None or len(text) <= width:
        return text
    glued = _COMMAND.sub(lambda m: m.group().replace(" ", "\x00"), text)
    lines = textwrap.wrap(
        glued,
        width=max(width, 20),
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "\n".join(lines).replace("\x00", " ")


_BACKTICKS = re.compile("`+")
# what jobctl formats itself (numbers, times, tokens): no Markdown construct can come of it
_OWN_TEXT = (bool, int, float, decimal.Decimal, dt.datetime, dt.date, dt.timedelta, uuid.UUID)


def markdown_code(text: str, *, in_table: bool = True) -> str:
    """``text`` as a Markdown code span: nothing inside one is Markdown or HTML (no heading,
    link, image, emphasis, tag or entity; GitHub's autolinks and @mentions skip code too).
    Made visible first (no newline or control character); fenced with more backticks than
    any run inside, padded when it starts or ends with a backtick or a space; ``in_table``:
    ``|`` as ``\\|``, which a table's cell splitter takes back to ``|`` (GFM), so a pipe in a
    value never adds a column. Empty text: an empty string (no span)."""
    text = safe_text.visible(text)
    if not text:
        return ""
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    # one space each side, which the span drops again (unless the text is only spaces)
    pad = " " if (text[0] in "` " or text[-1] in "` ") and text.strip() else ""
    if in_table:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_cell(value: Any) -> str:
    """A value for a Markdown table (tabulate's github and pipe formats, the report): what
    jobctl formats itself as it is, text from a row as a code span (``markdown_code``)."""
    if value is None:
        return ""
    if isinstance(value, _OWN_TEXT):
        return cell(value)
    return markdown_code(cell(value))


MARKDOWN_FORMATS = frozenset({"github", "pipe"})  # tabulate's formats that Markdown renders
# tabulate's markup formats that put a cell's text into the markup as it is (html and the
# latex ones escape it; github and pipe are escaped here): refused by --format
UNESCAPED_MARKUP_FORMATS = frozenset(
    {
        "unsafehtml",
        "latex_raw",
        "mediawiki",
        "moinmoin",
        "jira",
        "textile",
        "youtrack",
        "asciidoc",
        "rst",
        "orgtbl",
    }
)


# csv and tsv cells and rows (render/delimited); the names their callers have always found here
_flat = delimited._flat
FORMULA_START = delimited.FORMULA_START
csv_text = delimited.csv_text
csv_cells = delimited.csv_cells
_csv_cell = delimited._csv_cell
tsv_field = delimited.tsv_field
delimited_rows = delimited.delimited_rows


# ---------------------------------------------------------------- rendering
@dataclasses.dataclass(frozen=True)
class Screen:
    """The terminal a stream is, as the caller found it (``cli/terminal.screen``): a person
    reads it, ``columns`` wide, in colour or not. This module never asks the terminal."""

    columns: int
    colour: bool


def render(
    doc: Document, output: Output, fmt: str | None, stream: IO[str], screen: Screen | None = None
) -> None:
    """Write ``doc`` to ``stream`` in the chosen format; ``screen``: the terminal ``stream``
    is (None: a pipe or a file, or no person reading)."""
    if output is Output.json and isinstance(doc.payload, list | Iterator):
        _write_json_array(iter(doc.payload), stream)
    elif output is Output.json:
        _writer(stream)(to_json(doc.payload, indent=2) + "\n")
    elif output is Output.jsonl and isinstance(doc.payload, list):
        _writer(stream)(json_lines(doc.payload))  # rows in hand: one write
    elif output is Output.jsonl:
        items = doc.payload if isinstance(doc.payload, Iterator) else [doc.payload]
        put = _writer(stream)
        for chunk in _chunks(items, JSONL_CHUNK):  # streamed rows: a chunk at a time
            put(json_lines(chunk))
    elif output in (Output.csv, Output.tsv):
        _write_delimited(doc.sections, "," if output is Output.csv else "\t", stream)
    elif output is Output.wide:
        _write_screen(doc.sections, stream, screen, fit=False)
    elif fmt is None and screen is not None:
        _write_screen(doc.sections, stream, screen, fit=True)
    else:
        stream.write(format_tables(doc.sections, fmt or "simple"))


JSONL_CHUNK = 500  # streamed rows written per call


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write_json_array(items: Iterator[Any], stream: IO[str]) -> None:
    """An array streamed one element per line: readable, and written by json's C encoder
    (json.dumps only uses it without ``indent``: indenting 2,000 rows cost 40 ms)."""
    with json_array(stream) as write:
        for chunk in _chunks(items, JSONL_CHUNK):
            write(chunk)


@contextlib.contextmanager
def json_array(stream: IO[str]) -> Iterator[Callable[[Iterable[Any]], None]]:
    """A JSON array written as its elements come, one per line, a batch per write; closed
    only when the body ends without an error: a command that fails midway leaves what it
    wrote unterminated (nothing at all if no element came), never a valid document that a
    script would read as the whole answer (``[]``: nothing stuck)."""
    first = True
    put = _writer(stream)

    def write(items: Iterable[Any]) -> None:
        nonlocal first
        parts = []
        for item in items:
            parts.append(("[\n  " if first else ",\n  ") + to_json(item))
            first = False
        put("".join(parts))

    yield write  # an error raised in the body skips the closing
    put("[]\n" if first else "\n]\n")


def format_tables(sections: Sequence[Section], fmt: str) -> str:
    """Sections as tabulate tables (``fmt`` is any tabulate format), titles on their own line."""
    from tabulate import tabulate

    parts = []
    shown = markdown_cell if fmt in MARKDOWN_FORMATS else cell  # a document: values as code
    for section in sections:
        header = section.header()
        body = [[shown(row.get(c)) for c in header] for row in section.rows]
        text = (
            tabulate(body, headers=header, tablefmt=fmt, disable_numparse=True)
            if body
            else "(none)"
        )
        parts.append(f"{section.title}\n{text}" if section.title else text)
    return "\n\n".join(parts) + "\n"


def _write_delimited(sections: Sequence[Section], delimiter: str, stream: IO[str]) -> None:
    """One table a CSV reader takes whole (csvkit, ``mlr``, Python's csv): a document of
    several sections is one table too, ``section`` first (each section's ``name``), then
    every section's columns in the order they first come; a row is empty in the columns
    of the other sections. The header is each section's fixed header, never the rows'."""
    if len(sections) == 1:
        (section,) = sections
        with delimited_rows(stream, section.fixed_header(), delimiter) as write:
            for chunk in _chunks(section.rows, JSONL_CHUNK):  # streamed rows: flat memory
                write(chunk)
        return
    columns = dict.fromkeys(["section"])
    for section in sections:
        columns.update(dict.fromkeys(section.fixed_header() or section.header()))
    with delimited_rows(stream, list(columns), delimiter) as write:
        for section in sections:
            name = section.name or section.title
            for chunk in _chunks(section.rows, JSONL_CHUNK):
                write({**row, "section": name} for row in chunk)


def _console(stream: IO[str], screen: Screen | None) -> Console:
    from rich.console import Console

    colour = screen is not None and screen.colour
    return Console(
        file=stream,
        highlight=False,
        no_color=not colour,
        color_system="auto" if colour else None,
        width=screen.columns if screen is not None else None,
    )


def _write_screen(
    sections: Sequence[Section], stream: IO[str], screen: Screen | None, *, fit: bool
) -> None:
    console = _console(stream, screen)
    width = console.width if fit else None
    if screen is not None and len(sections) == 1 and isinstance(sections[0].rows, Iterator):
        # rows that come one by one, on a terminal: the first screen as soon as it is read
        for part in _streamed_section(sections[0], width):
            console.print(part, soft_wrap=True, crop=False)
        return
    console.print(screen_group(sections, width=width), soft_wrap=True, crop=False)


def _streamed_section(section: Section, width: int | None) -> Iterator[Any]:
    """``section``'s rows as they come, a chunk at a time (``screen.streamed``): with no more
    rows than its first chunk, the lines ``screen_group`` makes of them, byte for byte."""
    import itertools

    from rich.console import Group

    from jobctl.render import screen

    line = _line_maker(width)
    rows = iter(section.rows)
    first = next(rows, None)
    if first is None:
        yield line(f"{section.title}: (none)" if section.title else "(none)")
        return
    view = section.view or [_generic_column(c) for c in section.header()]
    hidden: list[Column] = []
    for n, grid in enumerate(screen.streamed(view, itertools.chain([first], rows), width, cell)):
        hidden += [c for c in grid.hidden if c not in hidden]
        yield Group(
            *([line(section.title, "bold")] if section.title and not n else []), *_grid_lines(grid)
        )
    if section.note:
        yield line(section.note, "dim")
    names = ", ".join(c.header.lower() for c in view if c in hidden)
    if names and width is not None:
        yield line(f"(-o wide adds {names})", "dim")


def _line_maker(width: int | None) -> Callable[..., Any]:
    """A line of text for a terminal ``width`` wide (None: as long as it is), cut to it."""
    from rich.text import Text

    from jobctl.render import screen

    def line(text: str, style: str = "") -> Text:
        return Text(screen.cut(text, width) if width else text, style=style, end="\n")

    return line


def _grid_lines(grid: Any) -> list[Any]:
    """A layout's lines as rich texts, styled."""
    from rich.text import Text

    parts = []
    for text, spans in grid.lines():
        rendered = Text(text, end="\n")
        for start, end, style in spans:
            rendered.stylize(style, start, end)
        parts.append(rendered)
    return parts


def screen_group(
    sections: Sequence[Section],
    *,
    width: int | None,
    height: int | None = None,
    title: str | None = None,
) -> Group:
    """The sections as terminal tables (``screen.layout``) in one renderable: one line per
    row, at most ``width`` cells wide; with ``height`` (what ``--watch`` refreshes), only
    the rows that fit, saying how many are not shown."""
    from rich.console import Group

    line = _line_maker(width)
    parts: list[Any] = [line(title, "bold")] if title else []
    room = None if height is None else height - len(parts) - 1  # the cursor's line
    for index, section in enumerate(sections):
        before = len(parts)
        if index:
            parts.append(line(""))
        rows = list(section.rows)
        if not rows:
            parts.append(line(f"{section.title}: (none)" if section.title else "(none)"))
        else:
            left = None if room is None else room - (len(parts) - before)  # the blank line
            parts.extend(_section_lines(section, rows, width, left, line))
        if room is not None:
            room -= len(parts) - before
    return Group(*parts)


def _generic_column(key: str) -> Column:
    """A terminal column for a key no view names: a ``*_s`` key is a duration (``OLDEST
    READY`` shows 1m45s, not ``OLDEST READY S`` 104.7); the machine formats keep seconds."""
    from jobctl.render import screen

    if key.endswith("_s"):
        return screen.Column(key, key[:-2].replace("_", " ").upper(), kind="seconds")
    return screen.Column(key, key.replace("_", " ").upper())


def _section_lines(
    section: Section, rows: list[Row], width: int | None, room: int | None, line: Any
) -> list[Any]:
    from jobctl.render import screen

    view = section.view or [_generic_column(c) for c in section.header()]
    shown = rows
    if room is not None:
        fixed = (1 if section.title else 0) + 2 + bool(section.note)  # and the notes
        if len(rows) > room - fixed:
            shown = rows[: max(room - fixed - 1, 0)]  # and a line saying how many are not
    grid = screen.layout(view, shown, width, cell)
    parts = [line(section.title, "bold")] if section.title else []
    parts += _grid_lines(grid)
    if len(shown) < len(rows):
        parts.append(
            line(
                f"… {len(rows) - len(shown)} more row(s) not shown: a taller terminal, "
                "or -o jsonl for every row",
                "dim",
            )
        )
    if section.note:
        parts.append(line(section.note, "dim"))
    if grid.hidden and width is not None:
        names = ", ".join(c.header.lower() for c in grid.hidden)
        parts.append(line(f"(-o wide adds {names})", "dim"))
    return parts


def rich_group(
    sections: Sequence[Section], *, columns: int, lines: int, title: str | None = None
) -> Group:
    """What ``--watch`` refreshes on a terminal: the sections fitted to its ``columns`` x
    ``lines`` screen."""
    from rich.console import Group
    from rich.text import Text

    # the cursor waits on a line of its own (screen_group keeps it free): a Ctrl-C echoed as
    # ^C after a line as wide as the screen would wrap, and the last refresh land a line low;
    # and one more line stays free for the newline Live ends with at exit (at a full screen
    # it would scroll the title away)
    fitted = screen_group(sections, width=columns, height=lines - 1, title=title)
    return Group(fitted, Text(""))


def key_values(row: Row) -> list[dict[str, Any]]:
    """A single record as a two-column table."""
    return [{"field": key, "value": value} for key, value in row.items()]
