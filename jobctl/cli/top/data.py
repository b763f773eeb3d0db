"""The console's glue to the workflows: the sessions kept open for the console's life (one
database, or one per target with ``--target``/``--all-targets``), what it reads on each
refresh (``ops.console``; across targets each row tagged with its target), a job's detail,
and the writes, each on its own target's session, each failure as one line for the status
bar rather than a traceback on the screen. A session whose connection is lost (a restart,
a failover, a pooler bounce) is opened again, as the reclaimer does, with backoff
(``console.Lost``); until then its last figures stay, said to be stale. No Textual here."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from rich.text import Text

from jobctl import db, durations, errors
from jobctl.cli.top import views
from jobctl.ops import console

if TYPE_CHECKING:
    from jobctl.contract.shapes import ManualResult, Row
    from jobctl.db.session import Session
    from jobctl.ops.manual import Action, Report
    from jobctl.ops.standby import Standing

T = TypeVar("T")
# how a site connects again: ``sessions.open`` as the command opened it, its lines to ``say``
Reopen = Callable[
    [Callable[[str], None]], contextlib.AbstractContextManager[tuple["Session", "Standing"]]
]


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

    # how to connect again (None: never, a session a test lent), the loss being retried,
    # the last refresh read here (kept on screen, across targets, while it is lost)
    reopen: Reopen | None = None
    lost: console.Lost | None = None
    last: console.Snapshot | None = None
    kept: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)

    def reconnect(self, say: Callable[[str], None]) -> None:
        """A new session in place of the lost one (its connection closed as it can)."""
        assert self.reopen is not None
        opened = contextlib.ExitStack()
        with db.mapped_errors():
            session, standing = opened.enter_context(self.reopen(say))
        self.close()
        self.session, self.standing, self.kept = session, standing, opened

    def close(self) -> None:
        """The site's connection closed (a lost one as it can: nothing to say of it)."""
        with contextlib.suppress(Exception):
            self.kept.close()
        with contextlib.suppress(Exception):
            self.session.conn.close()


@dataclasses.dataclass
class Source:
    """Where the console reads and writes: the sites, what to read, whether it may write."""

    sites: list[Site]
    ask: console.Ask
    writes: bool = False  # --allow-writes
    # what the last refresh has to say beside its figures: a reconnection, a target down
    notes: list[str] = dataclasses.field(default_factory=list)

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
        """The view's figures from every site. A site that fails keeps its last figures
        (across targets: the others' are fresh); one database that fails: ``Failed``."""
        ask = dataclasses.replace(self.ask, view=view)
        self.notes = []
        snaps, failed = [], []
        for site in self.sites:
            try:
                snap = self._do(site, functools.partial(self._read, site, ask))
            except Failed as exc:
                failed.append(str(exc))
                if site.last is None:
                    continue
                snap = site.last
            else:
                site.standing = snap.standing or site.standing
                site.last = snap
                # an id two rows hold: left out of the rows (every other job shown), named
                named = f"{site.target}: " if site.target else ""
                self.notes += [named + views.safe(line) for line in snap.repeated]
            snaps.append((site.target or "", snap))
        if failed and (not self.many or not snaps):
            raise Failed("; ".join(failed))
        self.notes += failed
        return console.merged(snaps) if self.many else snaps[0][1]

    # (the site's session as it is when called: a reconnection may have replaced it)
    @staticmethod
    def _read(site: Site, ask: console.Ask) -> console.Snapshot:
        return console.refresh(site.session, site.standing, ask)

    @staticmethod
    def _write(site: Site, action: Action, rows: list[Row], reason: str | None) -> Report:
        return console.act(site.session, action, rows, reason=reason)

    def reconnecting(self) -> list[str]:
        """Each lost site's reconnection, in a few words (for the strip)."""
        now = time.monotonic()
        return [
            (f"{site.target}: " if site.target else "") + site.lost.line(now)
            for site in self.sites
            if site.lost is not None
        ]

    def retry_in(self) -> float | None:
        """Seconds until the first reconnection due (None: nothing lost)."""
        now = time.monotonic()
        due = [site.lost.due - now for site in self.sites if site.lost is not None]
        return max(0.0, min(due)) if due else None

    def close(self) -> None:
        """The connections this console opened again (the first ones are the caller's)."""
        for site in self.sites:
            with contextlib.suppress(Exception):
                site.kept.close()

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
            write = functools.partial(self._write, site, action, mine, reason or None)
            for result in self._do(site, write).results:
                if site.target is not None:
                    result = cast("ManualResult", {"target": site.target, **result})
                results.append(result)
        return results

    def save_plan(self, path: Path, rows: Sequence[Row]) -> tuple[int, list[str]]:
        if self.many:
            raise Failed("a plan is of one database: start jobctl --target NAME top to save one")
        site = self.sites[0]
        return self._do(site, lambda: console.save_plan(site.session, path, rows))

    def _site(self, row: Row) -> Site:
        for site in self.sites:
            if site.target == row.get("target"):
                return site
        raise Failed(f"no target {row.get('target')!r}")  # (rows come from the sites)

    def _do(self, site: Site, work: Callable[[], T]) -> T:
        """``work`` on the site's session, its failure one line; a lost site connected again
        first when its backoff is over (else a ``Failed`` that says when)."""
        named = f"{site.target}: " if site.target else ""
        if site.lost is not None:
            lost, now = site.lost, time.monotonic()
            if not lost.is_due(now):  # (the strip says when the next try is)
                raise Failed(f"{named}{lost.why}")
            try:
                site.reconnect(self.notes.append)
            except errors.JobctlError as exc:
                lost.failed(time.monotonic(), self._line(site, exc))
                raise Failed(f"{named}{lost.why}") from None
            took = durations.human(time.monotonic() - lost.since)
            self.notes.append(f"{named}reconnected after {took} ({lost.tries + 1} tries)")
            site.lost = None
        try:
            with db.mapped_errors():
                return work()
        except errors.JobctlError as exc:
            line = self._line(site, exc)
            conn = site.session.conn
            if site.reopen is not None and (conn.closed or conn.broken):
                site.lost = console.Lost.at(time.monotonic(), line)
                line += f"; reconnecting in {durations.human(console.FIRST_RETRY_S)}"
            raise Failed(named + line) from None

    @staticmethod
    def _line(site: Site, exc: errors.JobctlError) -> str:
        dsn = site.session.settings.resolved_dsn() or None
        return " ".join(db.redact(exc.message, dsn).split())


def _untagged(row: Row) -> Row:
    return {k: v for k, v in row.items() if k != "target"}
