"""Talking to the person at the keyboard: data to stdout, messages and prompts to stderr,
a progress bar and a live view on a terminal, reclaim's batches and an operator write's
outcomes as they land. The writes' workflows yield their questions, which the commands put
here (``confirm``); the reclaimer service and a few reads call back into ``say``; nothing
else in jobctl prints (but the demo, which narrates)."""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from jobctl import errors
from jobctl.contract import safe_text, shapes
from jobctl.render import output, rows, views, write_lines

if TYPE_CHECKING:
    from jobctl.ops import manual

T = TypeVar("T", bound=Sequence[Any])


def emit(doc: output.Document, out: output.Output, fmt: str | None) -> None:
    """Data to stdout in the chosen format (``fmt``: any tabulate format, checked here)."""
    if fmt is not None:
        from tabulate import tabulate_formats

        if fmt not in tabulate_formats:
            known = ", ".join(sorted(tabulate_formats))
            raise errors.UsageError(f"--format {fmt!r} is not a tabulate format ({known})")
        if fmt in output.UNESCAPED_MARKUP_FORMATS:
            raise errors.UsageError(
                f"--format {fmt} would pass text from rows into {fmt} markup unescaped (a worker "
                "name could add a link, a column or a heading): use github or pipe (Markdown, "
                "escaped), html or latex (escaped), or a plain one (simple, grid, psql ...)"
            )
    output.render(doc, out, fmt, sys.stdout, screen(sys.stdout))


def on_terminal(stream: Any) -> bool:
    """A person reads ``stream``: the table is laid out for its width (see ``render.screen``)."""
    return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"


def use_rich(stream: Any) -> bool:
    """Colour and live views only on a terminal, and never with NO_COLOR or TERM=dumb."""
    return on_terminal(stream) and not os.environ.get("NO_COLOR")


def screen(stream: Any) -> output.Screen | None:
    """The terminal ``stream`` is, for the renderer (None: not a terminal)."""
    if not on_terminal(stream):
        return None
    return output.Screen(columns=screen_size()[0], colour=use_rich(stream))


def width() -> int | None:
    """The terminal's width when stdout is one (prose is wrapped to it), else None."""
    return columns(sys.stdout)


def columns(stream: Any) -> int | None:
    """The width of the terminal ``stream`` is, else None: the one place jobctl measures."""
    return screen_size()[0] if on_terminal(stream) else None


def screen_size() -> tuple[int, int]:
    """The terminal's columns and lines (or $COLUMNS and $LINES, else 80 x 24)."""
    import shutil

    size = shutil.get_terminal_size()
    return size.columns, size.lines


def say(message: str) -> None:
    """A message for the operator: stderr, never mixed with data; its own lines kept, what
    it quotes from rows shown safely (output.cell); on a terminal wrapped at spaces to its
    width, a jobctl command never split (output.prose)."""
    wide = columns(sys.stderr)
    print("\n".join(output.prose(line, wide) for line in message.split("\n")), file=sys.stderr)


PROMPT = " [y/N]:"  # what click puts after a confirmation's question (and a space)


def asked(question: str, width: int | None) -> str:
    """A confirmation's question as the prompt shows it: wrapped at spaces to the terminal's
    ``width`` (None: as it is), a jobctl command never split (``output.prose``), room left on
    its last line for click's `` [y/N]: ``."""
    if width is None:
        return question
    text = "\n".join(output.prose(line, width - 1) for line in (question + PROMPT).split("\n"))
    return text.removesuffix(PROMPT) if text.endswith(PROMPT) else question


def confirm(question: str, about: Sequence[Any] = (), title: str = "") -> None:
    """Ask on a terminal (showing the rows ``about`` to change: the first ``TABLE_ROWS`` and
    a count per worker); off a terminal, --yes is required. No changes nothing (exit 2), nor
    does Ctrl-C (exit 130): "cancelled; nothing changed". What a workflow's question
    (``manual.Asked``, reclaim's ``steps.Asked``) is put to."""
    if not sys.stdin.isatty():
        raise errors.Refused("not a terminal: pass --yes to confirm; nothing changed")
    if about:
        reclaiming = "action" in about[0]
        columns = rows.RECLAIM_COLUMNS if reclaiming else rows.PREVIEW_COLUMNS
        view = views.RECLAIM_VIEW if reclaiming else views.PREVIEW_VIEW
        shown = list(about[:TABLE_ROWS])
        # a one_database.Sample: its first rows and the counts of all (a million are never held)
        total = getattr(about, "total", len(about))
        if len(shown) < total:
            title = f"{title}: the first {len(shown)} of {total}"
        preview = output.Section(title, shown, columns, view)
        if "target" in about[0]:  # rows across targets: which database each is in
            (preview,) = views.across_targets(output.Document(None, [preview])).sections
        preview_doc = output.Document(None, [preview])
        output.render(preview_doc, output.Output.table, None, sys.stderr, screen(sys.stderr))
        if len(shown) < total:
            workers = getattr(about, "workers", None) or collections.Counter(
                r.get("reserved_by") for r in about
            )
            say("by worker: " + ", ".join(f"{w} {n}" for w, n in workers.most_common()))
    try:
        wide = screen_size()[0] if on_terminal(sys.stderr) else None
        agreed = typer.confirm(asked(question, wide), err=True)
    except typer.Abort:  # Ctrl-C (or end of input) at the prompt
        print(file=sys.stderr)
        raise errors.Cancelled(130) from None
    if not agreed:
        raise errors.Cancelled()


def with_progress(batches: Iterable[T], total: int | None, what: str) -> Iterator[T]:
    """``batches`` as they come, advancing a progress bar on a terminal (stderr) by each
    batch's length when ``total`` is known."""
    if not (sys.stderr.isatty() and total and total > 1):
        yield from batches
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(what, total=total)
        for batch in batches:
            yield batch
            progress.update(task, advance=len(batch))


@contextlib.contextmanager
def waiting(what: str) -> Iterator[tuple[Callable[[Any], None], Callable[[str], None]]]:
    """How a step-by-step change reports: ``(on_wait, on_done)`` callbacks for the core.

    ``on_wait`` gets a ``locks.Wait`` (why a step waits): a spinner line on a terminal, else
    a line on stderr (the core calls it at most once a second). ``on_done`` a step done."""
    if not use_rich(sys.stderr):
        yield (lambda wait: say(wait.describe())), (lambda step: say(f"done: {step}"))
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False)
    with console.status(what) as status:
        yield (
            lambda wait: status.update(escape(output.cell(wait.describe()))),
            lambda step: console.print(escape(output.cell(f"done: {step}"))),
        )


def live(
    out: output.Output, fmt: str | None, every_s: float
) -> contextlib.AbstractContextManager[Callable[[Any, output.Document], None]]:
    """How ``--watch`` shows each refresh: a context manager giving a ``show(at, doc)``.

    In place on a terminal (rich Live), else one JSON line per refresh (``{"at", "data"}``).
    """
    import contextlib

    @contextlib.contextmanager
    def lines() -> Iterator[Callable[[Any, output.Document], None]]:
        safe = safe_text.json_text if sys.stdout.isatty() else str
        yield lambda at, doc: print(
            safe(output.to_json({"at": at, "data": doc.payload})), flush=True
        )

    @contextlib.contextmanager
    def in_place() -> Iterator[Callable[[Any, output.Document], None]]:
        from rich.live import Live

        title = f"(every {every_s:g}s, Ctrl-C to stop)"
        with Live(auto_refresh=False, redirect_stderr=False) as view:

            def show(at: Any, doc: output.Document) -> None:
                wide, high = screen_size()
                stamp = f"{at:%H:%M:%S} {title}"
                group = output.rich_group(doc.sections, columns=wide, lines=high, title=stamp)
                view.update(group, refresh=True)

            yield show

    return in_place() if refreshed_in_place(out, fmt) else lines()


def refreshed_in_place(out: output.Output, fmt: str | None) -> bool:
    """Whether ``live`` refreshes a table in place (a terminal), not one JSON line each time."""
    return out.tabular and fmt is None and on_terminal(sys.stdout)


# ---------------------------------------------------------------- results of writes
# The rows a reclaim's table shows: the first TABLE_ROWS, then up to TABLE_ROWS skipped ones
# (what was not done), kept by the run's tally (``Request.whole``); every row with -o jsonl,
# json or csv. The totals go to stderr.
TABLE_ROWS = 20


def drain(
    batches: Iterable[list[shapes.ReclaimRow]],
    total: int | None,
    optional: Sequence[str],
    out: output.Output,
    fmt: str | None,
    *,
    columns: Sequence[str] = rows.RECLAIM_KEYS,
) -> None:
    """Print a reclaim's batches as they come (the run counts them, and keeps the rows its
    table shows; ``total``: how many are expected, for a progress bar): jsonl prints each
    batch as it lands, in one write; so do json, as the elements of one array (left unclosed
    when a later batch fails: never a valid document that reads as the whole), and csv and
    tsv, under one header (``optional``: the kind and queue it holds, mapped or not, with no
    row too); a table prints nothing until the end (``emit_reclaim``), so memory stays flat."""
    streamed: contextlib.AbstractContextManager[Callable[[Iterable[Any]], None]]
    batches = iter(batches)
    if out is output.Output.json:
        streamed = output.json_array(sys.stdout)
    elif out in (output.Output.csv, output.Output.tsv):
        delimiter = "," if out is output.Output.csv else "\t"
        # the header: every key of a reclaim row, and kind and queue where the table maps
        # them (across targets, whose mappings may differ: both), the same with no row
        columns = rows.with_optional(list(columns), optional)
        streamed = output.delimited_rows(sys.stdout, columns, delimiter)
    else:
        streamed = contextlib.nullcontext(lambda _batch: None)
    if out.tabular:  # the table printed at the end: its renderer imported meanwhile
        _import_behind("tabulate")
    with behind(lambda batch: _print_rows(batch, out, fmt)) as print_batch, streamed as write:
        for batch in with_progress(batches, total, "reclaiming"):
            if out is output.Output.jsonl:
                print_batch(batch)
            elif not out.tabular:
                write(batch)


def _import_behind(module: str) -> None:
    """Import ``module`` in a thread while the caller waits on the server (a wait lets go of
    the GIL): a reclaim's table, printed at its end, finds its renderer imported (tabulate,
    with wcwidth where installed: about 30 ms of start-up, docs/reference/performance.md)."""
    import importlib
    import threading

    def load() -> None:
        with contextlib.suppress(Exception):  # the caller's own import says what failed
            importlib.import_module(module)

    threading.Thread(target=load, name=f"import {module}").start()


_DONE = object()
YIELD_ROWS = 50  # rows the output thread prints before it lets the batches' thread run


def _print_rows(batch: list[shapes.ReclaimRow], out: output.Output, fmt: str | None) -> None:
    """A batch printed from the output thread, ``YIELD_ROWS`` at a time, letting go of the
    GIL in between (``sleep(0)``): the thread waiting on the server takes it back as soon as
    the next reply comes, not after the interpreter's 5 ms switch interval (which cost back
    most of what printing behind the batches saves: measured in docs/reference/performance.md)."""
    import time

    for start in range(0, len(batch), YIELD_ROWS):
        emit(output.Document(batch[start : start + YIELD_ROWS], []), out, fmt)
        time.sleep(0)


@contextlib.contextmanager
def behind(write: Callable[[Any], None], depth: int = 2) -> Iterator[Callable[[Any], None]]:
    """A hand-over to ``write``, run in a thread, in order, while the caller goes on: printing
    one reclaim batch overlaps the next batch's round trip (waiting on the server releases the
    GIL). At most ``depth`` items wait. On the way out, normal or not, every item handed over
    is written first (its batch is committed); an error of ``write`` (a closed pipe) is raised
    at the next hand-over or at the end, so at most the batch in flight then is committed
    unprinted (the history records it)."""
    import queue
    import threading

    items: queue.Queue[Any] = queue.Queue(depth)
    failed: list[BaseException] = []

    def work() -> None:
        while (item := items.get()) is not _DONE:
            if not failed:
                try:
                    write(item)
                except BaseException as exc:  # raised in the caller's thread
                    failed.append(exc)

    def hand_over(item: Any) -> None:
        if failed:
            raise failed[0]
        items.put(item)

    thread = threading.Thread(target=work, name="jobctl-output", daemon=True)
    thread.start()
    try:
        yield hand_over
    finally:
        items.put(_DONE)
        thread.join()
    if failed:
        raise failed[0]


def emit_reclaim(
    found: list[shapes.ReclaimRow], total: int, out: output.Output, fmt: str | None
) -> None:
    """A reclaim's rows at its end (what its tally kept of ``total``): a table of the first
    ones and the skipped ones; the other formats printed each batch as it landed."""
    if out.tabular:
        shown = rows.with_optional(rows.RECLAIM_COLUMNS, found)  # kind, queue: when mapped
        emit(views.some_rows(found, total, shown, views.RECLAIM_VIEW), out, fmt)


def emit_reclaimed(
    applied: list[shapes.ReclaimRow],
    out: output.Output,
    fmt: str | None,
    *,
    across_targets: bool = False,
) -> None:
    """One batch of the reclaimer service: JSON lines, or a table (its first rows: they are
    all applied, none skipped); ``across_targets``: its rows carry their target, the first
    column."""
    if out in (output.Output.jsonl, output.Output.json):
        doc = output.Document(applied, [])
        out = output.Output.jsonl
    elif out.tabular:
        shown = applied[:TABLE_ROWS]
        columns = rows.with_optional(rows.RECLAIM_COLUMNS, applied)
        doc = views.some_rows(shown, len(applied), columns, views.RECLAIM_VIEW)
    else:
        doc = views.table(applied, applied, rows.RECLAIM_COLUMNS, keys=rows.RECLAIM_KEYS)
    emit(views.across_targets(doc) if across_targets else doc, out, fmt)
    sys.stdout.flush()


def report(outcome: manual.Report, out: output.Output, fmt: str | None) -> None:
    """Print an operator write's outcomes; problems also on stderr; exit with the worst."""
    emit(
        views.table(
            outcome.results,
            outcome.results,
            rows.MANUAL_COLUMNS,
            views.MANUAL_VIEW,
            rows.MANUAL_KEYS,
        ),
        out,
        fmt,
    )
    apart = outcome.apart()
    for line in write_lines.apart(apart):
        say(line)
    totals = write_lines.report_totals(outcome.results, said_apart=bool(apart))
    if totals is not None:
        say(totals)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


def publish(textfile: Path | None, text: str) -> None:
    """``text`` to stdout, or replacing ``textfile`` in one rename (``metrics --textfile``:
    a scrape reads the old file or the new one, never half of one)."""
    if textfile is None:
        sys.stdout.write(text)
        return
    folder = textfile.parent
    try:
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{textfile.name}.", suffix=".tmp")
    except OSError as exc:
        raise errors.UsageError(f"--textfile {textfile}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)  # the collector runs as another user
        os.replace(temporary, textfile)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
