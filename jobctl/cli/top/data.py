"""The console's glue to the workflows: the sessions kept open for the console's life (one
database, or one per target with ``--target``/``--all-targets``), what it reads on each
refresh (``ops.console``; across targets each row tagged with its target), a job's detail,
and the writes, each on its own target's session, each failure as one line for the status
bar rather than a traceback on the screen. No Textual here."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

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
class Site:
    """One database the console reads: its session, the server it found, its target name
    (None: the one database of the command, its rows untagged)."""

    session: Session
    standing: Standing | None
    target: str | None = None

    @property
    def where(self) -> str:
        """The server and table: host:port (standby, lag) schema.table."""
        standing = self.standing
        server = ""
        if standing is not None:
            server = standing.where + (" (standby)" if standing.standby else "")
            if standing.standby and standing.lag_s:
                server += f" lag {standing.lag_s:.0f}s"
        named = self.session.settings.target
        return " ".join(p for p in (named, server, self.session.table.qualified) if p)


@dataclasses.dataclass
class Source:
    """Where the console reads and writes: the sites, what to read, whether it may write."""

    sites: list[Site]
    ask: console.Ask
    writes: bool = False  # --allow-writes

    @classmethod
    def one(
        cls, session: Session, standing: Standing | None, ask: console.Ask, *, writes: bool
    ) -> Source:
        return cls([Site(session, standing)], ask, writes)

    @property
    def many(self) -> bool:
        return len(self.sites) > 1 or self.sites[0].target is not None

    @property
    def where(self) -> str:
        if not self.many:
            return self.sites[0].where
        return f"{len(self.sites)} target(s): " + ", ".join(str(s.target) for s in self.sites)

    def refresh(self, view: str) -> console.Snapshot:
        ask = dataclasses.replace(self.ask, view=view)
        snaps = []
        for site in self.sites:
            snap = self._do(
                site, functools.partial(console.refresh, site.session, site.standing, ask)
            )
            site.standing = snap.standing or site.standing
            _refuse_repeated(site, snap)
            snaps.append((site.target or "", snap))
        return console.merged(snaps) if self.many else snaps[0][1]

    def detail(self, row: Row) -> Text:
        site = self._site(row)
        found, told = self._do(site, lambda: console.detail(site.session, row["id"]))
        return views.detail(row["id"], found, told, site.target)

    def act(self, action: Action, rows: Sequence[Row], reason: str) -> list[ManualResult]:
        if not self.writes:  # the screen asks nothing without --allow-writes; checked again
            raise Failed("read-only: start jobctl top --allow-writes to requeue or fail")
        results: list[ManualResult] = []
        for site in self.sites:
            mine = [_untagged(r) for r in rows if r.get("target") == site.target]
            if not mine:
                continue
            write = functools.partial(
                console.act, site.session, action, mine, reason=reason or None
            )
            for result in self._do(site, write).results:
                if site.target is not None:
                    result = cast("ManualResult", {"target": site.target, **result})
                results.append(result)
        return results

    def save_plan(self, path: Path, rows: Sequence[Row]) -> tuple[int, list[str]]:
        if self.many:
            raise Failed("a plan is of one database: start jobctl top --target NAME to save one")
        site = self.sites[0]
        return self._do(site, lambda: console.save_plan(site.session, path, rows))

    def _site(self, row: Row) -> Site:
        for site in self.sites:
            if site.target == row.get("target"):
                return site
        raise Failed(f"no target {row.get('target')!r}")  # (rows come from the sites)

    def _do(self, site: Site, work: Callable[[], T]) -> T:
        try:
            with db.mapped_errors():
                return work()
        except errors.JobctlError as exc:
            dsn = site.session.settings.resolved_dsn() or None
            line = " ".join(db.redact(exc.message, dsn).split())
            raise Failed(f"{site.target}: {line}" if site.target else line) from None


def _refuse_repeated(site: Site, snap: console.Snapshot) -> None:
    """A job is a row of the screen keyed by its id, and the target of a write by it: two
    rows of one id (a partitioned table keyed on the id and its partition key, the same id
    in two partitions) are refused in one line for the status bar, never shown as one."""
    for rows in (snap.stuck, snap.review):
        seen: set[str] = set()
        for row in rows:
            key = views.key(row)
            if key in seen:
                where = f"{site.target}: " if site.target else ""
                raise Failed(
                    f"{where}job id {views.safe(str(row['id']))} is held by more than one "
                    "row (ids repeat across the table's partitions): jobctl names a job by "
                    "its id alone and refuses such a table (jobctl schema check)"
                )
            seen.add(key)


def _untagged(row: Row) -> Row:
    return {k: v for k, v in row.items() if k != "target"}
