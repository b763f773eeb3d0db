"""Tables designed for a terminal: a few essential columns, more by priority as the width
allows, one line per row, never a wrapped cell (kubectl's ``get`` is the model).

A row shape declares its terminal columns once (``Column`` specs, see ``views``): the key, a
short header, a priority (0: always shown), how the value reads (``kind``) and whether it
may be cut. ``layout`` picks the columns that fit ``width`` and cuts, with an ellipsis, only
what cannot fit otherwise; ids, workers, actions and tokens are kept whole as long as
anything else can give. Pure: the renderer (``output``) prints the lines it returns.

Piped output and the machine formats never come here: they keep every key and the full
ISO timestamps (the scripts' contract).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from jobctl import durations

Row = Mapping[str, Any]
GAP = 2  # spaces between columns
MIN_CUT = 6  # a cut column keeps at least this many cells (or its header's)
ELLIPSIS = "…"


@dataclasses.dataclass(frozen=True)
class Column:
    """One terminal column of a row shape.

    ``kind``: how the value reads — ``text``, ``seconds`` (a duration: 5m20s), ``ago`` (seconds
    since: 5m20s ago, or "never"), ``until`` (seconds overdue: 5m20s ago; negative: in 19s),
    ``time`` (a timestamp, short), ``count``. ``whole``: an id, a worker, an action, a token:
    never cut while another column can give. ``value``: computes the cell from the row
    (e.g. attempts as 1/3). ``style``: a rich style for a value (colour that carries meaning;
    the text says the same without it)."""

    key: str
    header: str
    priority: int = 0
    kind: str = "text"
    whole: bool = False
    value: Callable[[Row], Any] | None = None
    style: Callable[[str], str] | None = None
    when: Callable[[Sequence[Row]], bool] | None = None  # shown only if true of the rows
    filled: bool = False  # shown only when some row has a value for it (else left out)
    copy: bool = False  # a token meant to be copied: never cut, even when nothing else gives
    # a column always shown that a narrow terminal drops rather than cut an id, a worker, a
    # policy or an action: the highest first (0: never dropped)
    drop: int = 0


def seconds(value: float | dt.timedelta | None) -> str:
    """A duration as people read it: 0.4s, 48s, 5m20s, 2h, 2h5m, 3d4h (``durations.human``)."""
    return durations.human(value)


def short_time(value: dt.datetime | None, today: dt.date | None = None) -> str:
    """A timestamp in the width of a terminal: 05:51:47 today, Dec 01 05:51 another day, in
    the time zone the database gave it."""
    if value is None:
        return ""
    if value.date() == (today or dt.datetime.now(value.tzinfo).date()):
        return f"{value:%H:%M:%S}"
    return f"{value:%b %d %H:%M}"


def text_of(column: Column, row: Row, cell: Callable[[Any], str]) -> str:
    """The cell's text: the value as ``column.kind`` reads, escaped by ``cell``."""
    value = column.value(row) if column.value is not None else row.get(column.key)
    kind = column.kind
    if kind == "seconds":
        return seconds(value)
    if kind == "ago":
        return "never" if value is None else f"{seconds(value)} ago"
    if kind == "until":
        if value is None:
            return ""
        total = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
        return f"{seconds(total)} ago" if total >= 0 else f"in {seconds(-total)}"
    if kind == "time" and isinstance(value, dt.datetime):
        return short_time(value)
    return cell(value)


@dataclasses.dataclass
class Layout:
    """What a table shows on a terminal: the columns, their widths, the cells, and the
    columns left out for want of width."""

    columns: list[Column]
    widths: list[int]
    cells: list[list[str]]
    hidden: list[Column]
    headed: bool = True  # its header line first (False: more rows of the layout before it)

    def lines(self) -> list[tuple[str, list[tuple[int, int, str]]]]:
        """Each line's text and its styled spans ``(start, end, style)``, header first."""
        from rich.cells import cell_len

        out: list[tuple[str, list[tuple[int, int, str]]]] = []
        header = [c.header for c in self.columns]
        table = [header, *self.cells] if self.headed else self.cells
        for index, cells in enumerate(table, start=0 if self.headed else 1):  # 0: the header
            parts: list[str] = []
            spans: list[tuple[int, int, str]] = []
            at = 0
            for n, (column, text, width) in enumerate(
                zip(self.columns, cells, self.widths, strict=True)
            ):
                last = n == len(self.columns) - 1
                shown = cut(text, width)
                plain = shown.isascii() and shown.isprintable()  # a cell a character
                used = len(shown) if plain else cell_len(shown)
                pad = "" if last else " " * (width - used + GAP)
                if index == 0:
                    spans.append((at, at + len(shown), "bold"))
                elif column.style is not None:
                    style = column.style(text)
                    if style:
                        spans.append((at, at + len(shown), style))
                parts.append(shown + pad)
                at += len(shown) + len(pad)
            out.append(("".join(parts).rstrip(), spans))
        return out


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, its end replaced by an ellipsis when cut."""
    from rich.cells import cell_len, set_cell_size

    if (len(text) <= width and text.isascii()) or cell_len(text) <= width:
        return text  # ASCII: a cell a character, no table of widths to look up
    if width <= 1:
        return ELLIPSIS[:width]
    return set_cell_size(text, width - 1).rstrip() + ELLIPSIS


def layout(
    columns: Sequence[Column],
    rows: Sequence[Row],
    width: int | None,
    cell: Callable[[Any], str],
    least: Mapping[str, int] | None = None,
) -> Layout:
    """The columns of ``columns`` that fit ``width`` (None: every column, nothing cut);
    ``least``: widths by key that a column keeps at least (the rows above it, streamed)."""
    from rich.cells import cell_len

    wanted = [
        c
        for c in columns
        if (c.when is None or c.when(rows))
        and (not c.filled or any(r.get(c.key) is not None for r in rows))
    ]
    texts = {id(c): [text_of(c, row, cell) for row in rows] for c in wanted}
    natural = {
        id(c): max([cell_len(c.header), *(cell_len(t) for t in texts[id(c)])]) for c in wanted
    }
    if least:
        for c in wanted:
            natural[id(c)] = max(natural[id(c)], least.get(c.key, 0))
    if width is None:
        chosen = wanted
    else:
        # by priority, never by the data: the columns shown are always the first ones in the
        # priority order (a column never shows while one before it does not); a text column
        # that may be cut and does not fit whole comes in cut, to TEXT_BUDGET cells at least,
        # as the last one (nothing after it is shown cutting it further)
        chosen = [c for c in wanted if c.priority == 0]
        used = sum(natural[id(c)] for c in chosen) + GAP * max(len(chosen) - 1, 0)
        for column in sorted((c for c in wanted if c.priority > 0), key=lambda c: c.priority):
            whole = natural[id(column)] + GAP
            if used + whole <= width:
                chosen.append(column)
                used += whole
                continue
            if used + _budget(column, natural[id(column)]) + GAP <= width:
                chosen.append(column)  # cut to fit
            break
        chosen = [c for c in wanted if c in chosen]  # the declared order
        # when even the essentials cannot fit without cutting a whole column (a worker,
        # whose hosts look alike once cut), the droppable ones go first, highest first
        while _least(chosen, natural) > width and any(c.drop for c in chosen):
            chosen.remove(max((c for c in chosen if c.drop), key=lambda c: c.drop))
    widths = [natural[id(c)] for c in chosen]
    if width is not None:
        widths = _shrink(chosen, widths, width)
    cells = [[texts[id(c)][i] for c in chosen] for i in range(len(rows))]
    return Layout(chosen, widths, cells, [c for c in wanted if c not in chosen])


FIRST_ROWS = 200  # rows streamed to a terminal: the first ones lay out the table
CHUNK_ROWS = 500  # the rest, printed a chunk at a time in the first ones' columns and widths


def streamed(
    columns: Sequence[Column],
    rows: Iterator[Row],
    width: int | None,
    cell: Callable[[Any], str],
) -> Iterator[Layout]:
    """Rows that come one by one (20,000 expired leases), laid out as they come so the first
    screen shows at once: the first ``FIRST_ROWS`` as ``layout`` lays them out (fewer: all of
    them, the very table ``layout`` makes of them), each next chunk in the same columns and
    widths (a cell that may be cut, cut), headless. A chunk that does not fit them (a column
    only its rows fill, an id, a worker or a token wider than its column, or any wider cell
    with every column whole: ``width`` None) is laid out again, no column narrower than
    before, its header above it if that changed the columns or their widths."""
    import itertools

    first = list(itertools.islice(rows, FIRST_ROWS))
    shown = layout(columns, first, width, cell)
    yield shown
    while chunk := list(itertools.islice(rows, CHUNK_ROWS)):
        texts = [[text_of(c, row, cell) for c in shown.columns] for row in chunk]
        if _fits(shown, columns, chunk, texts, width):
            shown = dataclasses.replace(shown, cells=texts, headed=False)
        else:
            least = dict(zip((c.key for c in shown.columns), shown.widths, strict=True))
            again = layout(columns, chunk, width, cell, least)
            same = again.columns == shown.columns and again.widths == shown.widths
            shown = dataclasses.replace(again, headed=not same)  # a header when it changed
        yield shown


def _fits(
    shown: Layout,
    columns: Sequence[Column],
    chunk: Sequence[Row],
    texts: Sequence[Sequence[str]],
    width: int | None,
) -> bool:
    """Whether ``chunk`` (its cells ``texts``) shows in ``shown``'s columns and widths."""
    from rich.cells import cell_len

    laid = {id(c) for c in (*shown.columns, *shown.hidden)}
    for c in columns:  # a column the rows above did not want, wanted by these
        if id(c) in laid:
            continue
        if (c.when is None or c.when(chunk)) and (
            not c.filled or any(r.get(c.key) is not None for r in chunk)
        ):
            return False
    tight = [
        n
        for n, c in enumerate(shown.columns)
        if width is None or c.whole or c.copy  # cut by no one
    ]
    return all(cell_len(row[n]) <= shown.widths[n] for row in texts for n in tight)


def _least(columns: Sequence[Column], natural: Mapping[int, int]) -> int:
    """The fewest cells ``columns`` take with every whole one whole and the rest cut to
    their floor (``_shrink``'s first pass at its furthest)."""
    from rich.cells import cell_len

    cells = [
        natural[id(c)]
        if c.whole or c.copy
        else min(natural[id(c)], max(MIN_CUT, cell_len(c.header)))
        for c in columns
    ]
    return sum(cells) + GAP * max(len(cells) - 1, 0)


TEXT_BUDGET = 20  # the least a text column brought in cut keeps (or its header's width)


def _budget(column: Column, natural: int) -> int:
    """The cells ``column`` needs to be shown at all: its natural width, but a text column
    that may be cut (an actor, a reason) at most TEXT_BUDGET (or its header's)."""
    from rich.cells import cell_len

    if column.whole or column.copy or column.kind != "text" or column.value is not None:
        return natural
    return min(natural, max(TEXT_BUDGET, cell_len(column.header)))


def _shrink(columns: Sequence[Column], widths: list[int], width: int) -> list[int]:
    """Widths cut down to ``width`` in all: the widest cuttable column first, then (only
    when nothing else can give) the whole ones, never below ``MIN_CUT`` or the header."""
    widths = list(widths)
    passes: list[Callable[[Column], bool]] = [
        lambda c: not c.whole and not c.copy,
        lambda c: not c.copy,
        lambda c: True,  # a terminal too narrow for even the tokens
    ]
    for allowed in passes:
        while sum(widths) + GAP * max(len(widths) - 1, 0) > width:
            floor = {i: min(widths[i], max(MIN_CUT, len(c.header))) for i, c in enumerate(columns)}
            candidates = [i for i, c in enumerate(columns) if allowed(c) and widths[i] > floor[i]]
            if not candidates:
                break
            widest = max(candidates, key=lambda i: widths[i])
            widths[widest] -= 1
    return widths


def checklist(items: Sequence[tuple[str, str, str]], width: int) -> list[str]:
    """A checklist for a terminal of ``width`` (``schema check``): each ``(mark, name,
    detail)`` one row, ``yes  name: detail``, a detail too long for the row wrapped at spaces
    under it, indented past the mark: never cut (each text already made safe by the caller)."""
    import textwrap

    mark_width = max((len(mark) for mark, _, _ in items), default=0) + GAP
    lines: list[str] = []
    for mark, name, detail in items:
        head = f"{mark:<{mark_width}}"
        lines += textwrap.wrap(
            f"{name}: {detail}" if detail else name,
            width=max(width, 30),
            initial_indent=head,
            subsequent_indent=" " * (mark_width + 2),
            break_long_words=False,
            break_on_hyphens=False,
        ) or [head.rstrip()]
    return lines
