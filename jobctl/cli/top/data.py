"""The console's glue to the workflows: one session kept open for the console's life, what
it reads on each refresh (``ops.console``), a job's detail, and the writes, each failure as
one line for the status bar rather than a traceback on the screen. No Textual here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.text import Text

from jobctl import db, errors
from jobctl.cli.top import views
from jobctl.ops import console

if TYPE_CHECKING:
    from jobctl.db.session import Session
    from jobctl.ops.manual import Action
    from jobctl.ops.replica import Standing
    from jobctl.render.rows import ManualResult, Row

T = TypeVar("T")


class Failed(Exception):
    """A read or write of the console failed: its one line, for the status bar."""


@dataclasses.dataclass
class Source:
    """Where the console reads and writes: the command's session, the server it found."""

    session: Session
    standing: Standing | None
    ask: console.Ask
    writes: bool = False  # --allow-writes

    @property
    def where(self) -> str:
        """The server and table, for the strip: host:port (standby) schema.table."""
        standing = self.standing
        server = ""
        if standing is not None:
            server = standing.where + (" (standby)" if standing.standby else "")
            if standing.standby and standing.lag_s:
                server += f" lag {standing.lag_s:.0f}s"
        table = self.session.table.qualified
        target = self.session.settings.target
        return " ".join(p for p in (target and f"[{target}]", server, table) if p)

    def refresh(self, *, summary: bool = False) -> console.Snapshot:
        ask = dataclasses.replace(self.ask, summary=summary)
        snap = self._do(lambda: console.refresh(self.session, self.standing, ask))
        self.standing = snap.standing or self.standing
        return snap

    def detail(self, job_id: Any) -> Text:
        found, told = self._do(lambda: console.detail(self.session, job_id))
        return views.detail(job_id, found, told)

    def act(self, action: Action, rows: Sequence[Row], reason: str) -> list[ManualResult]:
        if not self.writes:  # the screen asks nothing without --allow-writes; checked again
            raise Failed("read-only: start jobctl top --allow-writes to requeue or fail")
        return self._do(
            lambda: console.act(self.session, action, rows, reason=reason or None).results
        )

    def save_plan(self, path: Path, rows: Sequence[Row]) -> tuple[int, list[str]]:
        return self._do(lambda: console.save_plan(self.session, path, rows))

    def _do(self, work: Callable[[], T]) -> T:
        try:
            with db.mapped_errors():
                return work()
        except errors.JobctlError as exc:
            dsn = self.session.settings.resolved_dsn() or None
            raise Failed(" ".join(db.redact(exc.message, dsn).split())) from None
