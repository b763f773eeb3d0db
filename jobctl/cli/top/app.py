"""``jobctl top``'s Textual app: the views (stuck, review, summary) under the summary strip,
refreshed every ``--every`` with the cursor and the marks kept on the same jobs (by id), the
keys in the footer, and the screens it opens: a job's detail, a one-line prompt, a
confirmation, a write's outcome. Every cell is a ``rich.text.Text`` of safe text
(``views``): nothing from a row is read as markup. Reads and writes go through
``data.Source`` (the workflows of ``ops.console``)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static
from textual.widgets.data_table import ColumnKey

from jobctl.cli.top import views
from jobctl.cli.top.data import Failed, Source

if TYPE_CHECKING:
    from jobctl.contract.shapes import Row
    from jobctl.ops.console import Snapshot
    from jobctl.ops.manual import Action

CSS = """
#strip { height: 2; background: $boost; }
#title { height: 1; text-style: bold; }
#rows { height: 1fr; }
#summary { height: 1fr; display: none; }
#filter { dock: bottom; display: none; height: 3; }
#message { height: auto; max-height: 3; color: $warning; }
#keys { height: 2; background: $boost; }
TextScreen, PromptScreen, ConfirmScreen { align: center middle; }
#text-box { width: 100%; height: 100%; border: round $accent; }
#prompt-box { width: 100%; height: auto; max-height: 100%; border: round $accent; }
"""


class TextScreen(ModalScreen[None]):
    """A job's detail, or a write's outcome: scrolled with the arrows or j/k, Esc closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "close"),
        Binding("j,down", "down", show=False),
        Binding("k,up", "up", show=False),
    ]

    def __init__(self, text: Text) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="text-box"):
            yield Static(self.text, markup=False, id="text")

    def action_close(self) -> None:
        self.dismiss(None)

    def action_down(self) -> None:
        self.query_one("#text-box", VerticalScroll).scroll_down(animate=False)

    def action_up(self) -> None:
        self.query_one("#text-box", VerticalScroll).scroll_up(animate=False)


class PromptScreen(ModalScreen[str | None]):
    """A one-line prompt: Enter gives the line, Esc cancels (None)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-box"):
            yield Static(views.plain(self.question, "bold"), markup=False)
            yield Input(id="answer")
            yield Static(views.plain("enter goes, esc cancels", "dim"), markup=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """The rows and what will be written: ``y`` goes, any other key cancels."""

    def __init__(self, text: Text) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="prompt-box"):
            yield Static(self.text, markup=False)

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        self.dismiss(event.key == "y")


class FilterInput(Input):
    """The filter line: Enter applies, Esc clears."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "clear_filter", "clear")]

    def action_clear_filter(self) -> None:
        self.value = ""
        self.post_message(self.Submitted(self, ""))


class TopApp(App[int]):
    """The console. ``source`` reads and writes; ``every`` the refresh."""

    CSS = CSS
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit_top", "quit"),
        Binding("ctrl+c", "interrupt", show=False, priority=True),
        Binding("j", "move(1)", show=False),
        Binding("k", "move(-1)", show=False),
        Binding("1", "view('stuck')", show=False),
        Binding("2", "view('review')", show=False),
        Binding("3", "view('summary')", show=False),
        Binding("slash", "filter", show=False),
        Binding("space", "mark", show=False),
        Binding("escape", "clear", show=False),
        Binding("r", "write('requeue')", show=False),
        Binding("f", "write('fail')", show=False),
        Binding("p", "plan", show=False),
        Binding("question_mark,f1", "help", show=False),
    ]

    def __init__(self, source: Source, every: dt.timedelta) -> None:
        super().__init__()
        self.source = source
        self.every = every
        self.view = views.STUCK
        self.snap: Snapshot | None = None
        self.marks: set[str] = set()  # job ids, as text: kept across refreshes
        self.needle = ""  # the filter
        self.shown: list[Row] = []  # the rows on screen, in order
        self.shown_view = views.STUCK  # the view whose rows ``shown`` holds
        self.at: dict[str, tuple[str, int]] = {}  # each view's cursor: its job id, its line
        # what the table holds: the view, the jobs in order, their cells, its column keys
        self.table_view = ""
        self.table_ids: list[str] = []
        self.table_cells: list[list[Text]] = []
        self.column_keys: list[ColumnKey] = []
        self.refreshes = 0
        self.retrying = False  # a reconnection's timer is set

    # ------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static(id="strip", markup=False)
        yield Static(id="title", markup=False)
        table: DataTable[Text] = DataTable(id="rows", cursor_type="row", zebra_stripes=False)
        yield table
        yield VerticalScroll(Static(id="summary-text", markup=False), id="summary")
        yield FilterInput(placeholder="filter: id, worker, error…", id="filter")
        yield Static(id="message", markup=False)
        yield Static(
            views.plain(views.KEYS.split("\n")[0]) + "\n" + views.plain(views.KEYS.split("\n")[1]),
            id="keys",
            markup=False,
        )

    def on_mount(self) -> None:
        self.reload()
        self.set_interval(self.every.total_seconds(), self.reload)
        self.set_interval(1.0, self._tick)
        self.query_one("#rows", DataTable).focus()

    # ------------------------------------------------------------ data
    def reload(self) -> None:
        """Read again and redraw, keeping the cursor on the same job; a lost database is
        tried again when its backoff is over, not only at the next refresh."""
        try:
            self.snap = self.source.refresh(self.view)
        except Failed as exc:
            self.say(f"refresh failed: {exc}")
        else:
            if self.source.notes:
                self.say("; ".join(self.source.notes))
        self.refreshes += 1
        self.redraw()
        wait = self.source.retry_in()
        if wait is not None and not self.retrying and wait < self.every.total_seconds():
            self.retrying = True
            self.set_timer(max(wait, 0.05), self._retry)

    def _retry(self) -> None:
        self.retrying = False
        self.reload()

    def _tick(self) -> None:
        """The strip's countdown, each second, while a reconnection waits (nothing read)."""
        if self.source.retry_in() is not None:
            self._strip()

    def rows_of(self, view: str) -> list[Row]:
        if self.snap is None or view == views.SUMMARY:
            return []
        found = self.snap.stuck if view == views.STUCK else self.snap.review
        return [r for r in found if views.matches(r, self.needle)]

    def _strip(self) -> None:
        strip = views.strip(
            self.snap,
            writes=self.source.writes,
            every=self.every,
            where=self.source.where,
            lost=self.source.reconnecting(),
        )
        widget = self.query_one("#strip", Static)
        widget.update(strip)
        # two lines, three while something is paused: set here rather than left to height
        # auto, so that the table gets its rows back as soon as a pause goes
        widget.styles.height = max(2, min(3, str(strip).count("\n") + 1))

    def redraw(self) -> None:
        self._strip()
        table = self.query_one("#rows", DataTable)
        summary = self.query_one("#summary", VerticalScroll)
        showing_rows = self.view != views.SUMMARY
        table.display, summary.display = showing_rows, not showing_rows
        names = {views.STUCK: "1 stuck", views.REVIEW: "2 awaiting review", "summary": "3 summary"}
        title = Text(names[self.view], style="bold")
        current = self.current()
        if current is not None:
            table_at = self.query_one("#rows", DataTable).cursor_row
            self.at[self.shown_view] = (views.key(current), table_at)
        if showing_rows:
            self.shown, self.shown_view = self.rows_of(self.view), self.view
            line = views.counted(self.view, self.snap, len(self.shown), self.needle)
            title.append(f"  {line}", style="")
            marked = sum(views.key(r) in self.marks for r in self.shown)
            if marked:  # (marks on jobs of another view, or filtered out, wait for them)
                title.append(f"  {marked} marked", style="bold magenta")
            self._fill(table)
        else:
            self.query_one("#summary-text", Static).update(views.summary(self.snap))
        self.query_one("#title", Static).update(title)

    def _fill(self, table: DataTable[Text]) -> None:
        """The view's rows into the table: the cells that changed, when the same jobs are
        there in the same order (a refresh: a full redraw measures every cell), else all."""
        ids = [views.key(r) for r in self.shown]
        cells = [
            views.cells(self.view, row, key in self.marks)
            for row, key in zip(self.shown, ids, strict=True)
        ]
        if self.table_view == self.view and ids == self.table_ids:
            for key, new, old in zip(ids, cells, self.table_cells, strict=True):
                for column, cell, was in zip(self.column_keys, new, old, strict=True):
                    if (cell.plain, str(cell.style)) != (was.plain, str(was.style)):
                        wider = cell.cell_len > table.columns[column].content_width
                        table.update_cell(key, column, cell, update_width=wider)
            self.table_cells = cells
            return
        current, at = self.at.get(self.view, ("", 0))
        table.clear(columns=True)
        self.column_keys = table.add_columns(*views.headers(self.view, self.source.many))
        for key, row_cells in zip(ids, cells, strict=True):
            table.add_row(*row_cells, key=key)
        self.table_view, self.table_ids, self.table_cells = self.view, ids, cells
        if ids:
            wanted = ids.index(current) if current in ids else at
            table.move_cursor(row=max(0, min(wanted, len(ids) - 1)), animate=False)

    def current(self) -> Row | None:
        table = self.query_one("#rows", DataTable)
        if not self.shown or not 0 <= table.cursor_row < len(self.shown):
            return None
        return self.shown[table.cursor_row]

    def chosen(self) -> list[Row]:
        """The marked rows of the view (on screen, filter applied), else the current one."""
        marked = [r for r in self.shown if views.key(r) in self.marks]
        if marked:
            return marked
        current = self.current()
        return [current] if current is not None else []

    def say(self, line: str) -> None:
        """A line under the rows, wrapped (three lines at most), never cut at 80 columns."""
        self.query_one("#message", Static).update(views.message(line))

    # ------------------------------------------------------------ keys
    def action_help(self) -> None:
        self.push_screen(TextScreen(views.help_text(writes=self.source.writes)))

    def action_quit_top(self) -> None:
        self.exit(0)

    def action_interrupt(self) -> None:
        """Ctrl-C, anywhere (a prompt too): out, as a command it interrupts (exit 130)."""
        self.exit(130, return_code=130)

    def action_move(self, by: int) -> None:
        table = self.query_one("#rows", DataTable)
        if by > 0:
            table.action_cursor_down()
        else:
            table.action_cursor_up()

    def action_view(self, view: str) -> None:
        if view != self.view:
            self.view = view
            self.reload()  # (a refresh reads the rows of the view on screen)
            if view != views.SUMMARY:
                self.query_one("#rows", DataTable).focus()

    def action_filter(self) -> None:
        box = self.query_one("#filter", FilterInput)
        box.value = self.needle
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "filter":
            return
        self.needle = event.value.strip()
        event.input.display = False
        self.query_one("#rows", DataTable).focus()
        self.redraw()

    def action_clear(self) -> None:
        if self.needle:
            self.needle = ""
            self.redraw()

    def action_mark(self) -> None:
        current = self.current()
        if current is None:
            return
        key = views.key(current)
        self.marks.symmetric_difference_update({key})
        self.redraw()
        self.action_move(1)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        current = self.current()
        if current is None:
            return
        try:
            text = self.source.detail(current)
        except Failed as exc:
            self.say(f"detail: {exc}")
            return
        self.push_screen(TextScreen(text))

    # ------------------------------------------------------------ writes
    def action_write(self, action: Action) -> None:
        if not self.source.writes:
            self.say(f"read-only: {action} writes nothing; start with top --allow-writes")
            return
        rows = self.chosen()
        if not rows:
            self.say(f"{action}: no job here (1 stuck, 2 review)")
            return
        need = " (required: it becomes last_error)" if action == "fail" else " (optional)"

        def asked(reason: str | None) -> None:
            if reason is None:
                self.say(f"{action} cancelled; nothing written")
                return
            if action == "fail" and not reason.strip():
                self.say("fail needs a reason; nothing written")
                return
            text = views.confirmation(action, rows, reason, self.source.where)
            self.push_screen(ConfirmScreen(text), lambda go: self._write(action, rows, reason, go))

        self.push_screen(PromptScreen(f"{action} {len(rows)} job(s): reason{need}"), asked)

    def _write(self, action: Action, rows: list[Row], reason: str, go: bool | None) -> None:
        if not go:
            self.say(f"{action} cancelled; nothing written")
            return
        try:
            results = self.source.act(action, rows, reason)
        except Failed as exc:
            self.say(f"{action}: {exc}")
            return
        text, line = views.outcome(action, [dict(r) for r in results])
        written = {views.key(dict(r)) for r in results if r["outcome"] in ("requeued", "failed")}
        self.marks -= written
        self.reload()
        self.say(f"{action}: {line}")
        self.push_screen(TextScreen(text))

    def action_plan(self) -> None:
        rows = self.chosen()
        if not rows:
            self.say("plan: no job here (1 stuck, 2 review)")
            return

        def asked(path: str | None) -> None:
            if not path or not path.strip():
                self.say("plan cancelled; nothing saved")
                return
            try:
                saved, left = self.source.save_plan(Path(path.strip()).expanduser(), rows)
            except Failed as exc:
                self.say(f"plan: {exc}")
                return
            where = views.safe(path.strip())
            line = f"plan of {saved} job(s) saved to {where}: jobctl requeue --plan {where}"
            self.say(line + (f" ({len(left)} changed, left out)" if left else ""))

        self.push_screen(PromptScreen(f"save {len(rows)} job(s) as a plan: path"), asked)

    def status(self) -> dict[str, Any]:
        """What the screen holds, for tests: the view, the ids shown, the marks, the cursor."""
        current = self.current()
        return {
            "view": self.view,
            "ids": [views.key(r) for r in self.shown],
            "marks": set(self.marks),
            "current": None if current is None else views.key(current),
            "message": str(self.query_one("#message", Static).render()),
        }
