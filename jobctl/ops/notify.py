"""Notifications from the reclaimer (``reclaim --every``) and ``stuck --watch``: what is worth
telling (``Watch``: conditions, their ``resolved``, a rate limit per condition) and what a
reclaimer told open across its restarts (``Opened``). Their delivery is ``notify_send``'s, the
payloads ``render.notifications``'; where the URLs come from, and which are refused, is
``notify_urls``'.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import shlex
import socket
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from jobctl import durations, errors
from jobctl.contract import safe_text
from jobctl.ops import notify_send
from jobctl.render import notifications
from jobctl.render.notifications import Notice

INTERVAL_S = 300.0  # a condition is told at most once per interval (the rest aggregated)
REVIEW_EVERY_S = 60.0  # how often the reclaimer counts the jobs waiting for review
BURST = 20  # expired leases in one pass (or one refresh of stuck --watch): expiry_burst
# a condition is told once it has lasted this long (--notify-after): a database restarted in
# a few seconds is no page; one that clears sooner is told nothing, neither trigger nor resolve
NOTIFY_AFTER_S = 60.0
# conditions told at once whatever --notify-after says: a burst is one pass's count (the
# next pass's count clears it), its own threshold is its filter
AT_ONCE = ("expiry_burst",)
# the conditions the reclaimer judges: what its state file (``Opened``) may list
CONDITIONS = ("target_down", "expiry_burst", "review_waiting")
STATE_SCHEMA = "jobctl.notify-state/1"
STATE_BYTES = 65536  # what is read of a state file at most (a few keys)

SUMMARY_CHARS = 4_096  # a notice's summary at most, as a display cuts a row's text


def bounded(summary: str) -> str:
    """A notice's summary, cut past SUMMARY_CHARS characters with a note as the reads' cut
    says it: a database's message can quote an application's text (a trigger's RAISE of a
    30 MB value), and every receiver would be sent all of it."""
    if len(summary) <= SUMMARY_CHARS:
        return summary
    head = summary[:SUMMARY_CHARS]
    more = len(summary.encode()) - len(head.encode())
    return f"{head}… ({more} more bytes)"


# ---------------------------------------------------------------- what is open, across restarts
class Opened:
    """The conditions a reclaimer told open (triggered, not resolved yet), kept across its
    restarts: one small file per target and table in ``directory`` (systemd's
    ``StateDirectory=``, or ``--notify-state-dir``), holding only their dedup keys and when
    each was opened (no URL, no routing key), written whole each time (a temporary file
    renamed over it, mode 0600). A file that cannot be read or written is said in the log,
    never an error: the service goes on as if it had none."""

    def __init__(
        self, directory: Path, *, table: str, target: str | None, log: Callable[[str], None]
    ) -> None:
        name = "+".join(urllib.parse.quote(part, safe="") for part in (target or "-", table))
        self.path, self.log = Path(directory) / f"notify-{name}.json", log

    def read(self) -> dict[str, str] | None:
        """Each dedup key the file lists and when it was opened; None when not known (no
        file yet, or one that cannot be read or is not this format: said in the log)."""
        try:
            with self.path.open(encoding="utf-8") as f:
                text = f.read(STATE_BYTES)
        except FileNotFoundError:
            self.log(f"notify: {self.path} does not exist yet: {UNKNOWN}")
            return None
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            self.log(f"notify: cannot read {self.path}: {safe_text.visible(why)}: {UNKNOWN}")
            return None
        try:
            data = json.loads(text)
            opened = data["open"]
            if data.get("schema") != STATE_SCHEMA or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in opened.items()
            ):
                raise ValueError
        except (ValueError, KeyError, TypeError, AttributeError):
            self.log(f"notify: {self.path} is not a {STATE_SCHEMA} file: {UNKNOWN}")
            return None
        return dict(opened)

    def write(self, opened: dict[str, str]) -> None:
        """``opened`` (dedup key -> when opened) as the file's whole content, atomically."""
        body = json.dumps({"schema": STATE_SCHEMA, "open": opened}, indent=1, sort_keys=True)
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".notify-")  # 0600
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(body + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(temporary, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
        except OSError as exc:
            self.log(f"notify: cannot write {self.path}: {notify_send.why(exc)}")


class Send(Protocol):
    """How a watch sends a notice (``notify_send.Sender.send``): ``delivered``, when given,
    is told on another thread whether every receiver delivered it."""

    def __call__(self, notice: Notice, delivered: Callable[[bool], None] | None = None) -> None: ...


# said when a run does not know what an earlier run left open
UNKNOWN = (
    "what an earlier run left open is not known: with PagerDuty, each condition is resolved "
    "the first time this run finds it clear"
)


class Watch:
    """What the service (or a watch) saw, turned into notices: one-shot events aggregated
    and told at most once per ``interval_s`` per condition; conditions told once they have
    lasted ``after_s`` (``since`` says when they began; again at most once per interval if
    they flap) and ``resolved`` when they clear. A condition that clears before ``after_s``
    is told nothing, neither its trigger nor its resolve: counted in ``quiet`` and said in
    the log (``log``). ``tick`` tells what has come due between two judgements, so a
    condition is told at its minimum, not at the next judgement after it."""

    def __init__(
        self,
        send: Send,
        *,
        table: str,
        target: str | None,
        command: str,
        host: str | None = None,
        interval_s: float = INTERVAL_S,
        burst: int = BURST,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
        delivery: Callable[[], tuple[int, int]] = lambda: (0, 0),
        close_stale: bool = False,
        after_s: float = NOTIFY_AFTER_S,
        log: Callable[[str], None] = lambda line: None,
        opened: Opened | None = None,
    ) -> None:
        self.send, self.table, self.target, self.command = send, table, target, command
        self.after_s, self.log = after_s, log
        # conditions on and not told yet: since when (the clock's, and the wall's) and their
        # latest notice, told by a judgement or a ``tick`` once they have lasted ``after_s``
        self.began: dict[str, tuple[float, dt.datetime, Callable[[], Notice]]] = {}
        self.quiet = 0  # conditions that cleared before after_s: told nothing
        # a receiver that keeps incidents (PagerDuty) may hold one an earlier run opened and
        # could not resolve (it stopped first): unless its state file says which, the first
        # time this run finds a condition clear, it says ``resolved`` all the same (a resolve
        # of nothing open is a no-op)
        self.close_stale = close_stale
        self.seen_clear: set[str] = set()  # conditions this run has judged clear at least once
        self.delivery = delivery  # (sent, failed or dropped) so far: the pass record keeps them
        self.host = host or socket.gethostname()
        self.interval_s, self.burst, self.clock, self.now = interval_s, burst, clock, now
        self.last_sent: dict[str, float] = {}
        self.held: dict[str, int] = {}  # notices held back per condition since the last sent
        self.active: set[str] = set()  # conditions told and not yet resolved
        self.pending: dict[str, dict[str, Any]] = {}  # one-shot events gathered since told
        self.pass_rows = 0
        self.pass_ids: list[str] = []  # this pass's first ids (an expiry burst names them)
        self.last_review = -1e18
        # the pauses as last read, by (dimension, value, since); None: not read yet
        self.pauses: dict[tuple[str, str, str], dict[str, Any]] | None = None
        # which conditions are open, kept across restarts (``Opened``): when the file says
        # what an earlier run left open, those are this run's to resolve, and no other is
        # resolved (no close_stale); else the file is written once this run knows (each
        # condition found clear, or told open, once)
        self.store, self.known = opened, False
        self.opened_at: dict[str, str] = {}  # each condition told open: when
        # each condition resolved and not known delivered yet: when opened, and its resolve.
        # It stays in the file until every receiver delivered that resolve (``settle``): one
        # given up, dropped or still queued when the run stops is the next run's to resolve
        self.resolving: dict[str, tuple[str, Notice]] = {}
        self.settled: list[tuple[str, Notice, bool]] = []  # reported on receivers' threads
        self.settled_lock = threading.Lock()
        if opened is not None:
            found = opened.read()
            if found is not None:
                self.known, self.close_stale = True, False
                for name in CONDITIONS:
                    if self._key(name) in found:
                        self.active.add(name)
                        self.opened_at[name] = found[self._key(name)]
                if self.active:
                    log(
                        f"notify: an earlier run left open {', '.join(sorted(self.active))} "
                        f"({opened.path}): each resolved when this run finds it clear"
                    )

    @property
    def prefix(self) -> str:
        """What the notices' ``next`` commands begin with, so that they run as printed: the
        target (whose config names the table), else the table unless it is the default
        ``jobs``, each quoted for a shell."""
        if self.target:
            return f"jobctl --target {shlex.quote(self.target)} "
        if self.table in ("jobs", "public.jobs"):
            return "jobctl "
        return f"jobctl --table {shlex.quote(self.table)} "

    def _notice(
        self, event: str, summary: str, *, condition: str | None = None, **kw: Any
    ) -> Notice:
        where = f"{self.table}" + (f" ({self.target})" if self.target else "")
        return Notice(
            event=event,
            condition=condition or event,
            summary=f"{where}: {safe_text.visible(bounded(summary))}",
            table=self.table,
            target=self.target,
            at=self.now(),
            host=self.host,
            command=self.command,
            **kw,
        )

    def _key(self, condition: str) -> str:
        return notifications.dedup_key(self.target, self.table, condition)

    def _remember(self) -> None:
        """The open conditions written to the state file, once this run knows them."""
        if self.store is None:
            return
        if not self.known:
            if not all(c in self.seen_clear or c in self.active for c in CONDITIONS):
                return
            self.known = True
        listed = {self._key(n): at for n, (at, _) in self.resolving.items()}
        listed.update((self._key(n), self.opened_at[n]) for n in self.active)
        self.store.write(dict(sorted(listed.items())))

    def _delivered(self, name: str, resolve: Notice, ok: bool) -> None:
        """A resolve's fate, reported on a receiver's thread: only recorded, the watch's own
        thread writes the file (``settle``)."""
        with self.settled_lock:
            self.settled.append((name, resolve, ok))

    def settle(self) -> None:
        """The resolves reported since the last call: a condition whose resolve every
        receiver delivered leaves the state file; one not delivered stays listed (said), so
        that the next run resolves it. Called at each judgement and tick, and at the end."""
        with self.settled_lock:
            settled, self.settled = self.settled, []
        changed = False
        for name, resolve, ok in settled:
            waiting = self.resolving.get(name)
            if waiting is None or waiting[1] is not resolve:
                continue  # opened again since: the file lists it as open
            if ok:
                del self.resolving[name]
                changed = True
            else:
                self.log(
                    f"notify: the resolve of {name} was not delivered: the state file keeps "
                    "it open, the next run resolves it"
                )
        if changed:
            self._remember()

    def _due(self, condition: str) -> bool:
        last = self.last_sent.get(condition)
        return last is None or self.clock() - last >= self.interval_s

    def _tell(self, notice: Notice) -> None:
        self.last_sent[notice.condition] = self.clock()
        self.held.pop(notice.condition, None)
        self.send(notice)

    # ------------------------------------------------------------ one-shot events
    def reclaimed(self, applied: Sequence[Any], park_status: str | None = None) -> None:
        """A batch the reclaimer applied: its requeued and parked jobs gathered."""
        for row in applied:
            event = "reclaimed" if row["action"] == "requeue" else "parked"
            gathered = self.pending.setdefault(event, {"jobs": 0, "ids": [], "park": park_status})
            gathered["jobs"] += 1
            if len(gathered["ids"]) <= notifications.MAX_IDS:
                gathered["ids"].append(str(row["id"]))
            if len(self.pass_ids) < notifications.MAX_IDS + 1:
                self.pass_ids.append(str(row["id"]))
        self.pass_rows += len(applied)

    def _flush(self) -> None:
        for event, gathered in list(self.pending.items()):
            if not self._due(event):
                continue
            del self.pending[event]
            jobs = gathered["jobs"]
            if event == "reclaimed":
                summary = f"{jobs} job(s) with an expired lease requeued"
                nxt = [f"{self.prefix}events --since 10m"]
            else:
                park = gathered["park"] or "failed"
                summary = f"{jobs} job(s) with an expired lease parked as {park} for a human"
                nxt = [f"{self.prefix}review"]
            self._tell(
                self._notice(
                    event,
                    summary,
                    counts={"jobs": jobs},
                    ids=gathered["ids"],
                    next=nxt,
                    suppressed=self.held.get(event, 0),
                )
            )

    # ------------------------------------------------------------ conditions
    def _after(self, name: str) -> float:
        return 0.0 if name in AT_ONCE else self.after_s

    def _condition(self, name: str, on: bool, notice: Callable[[], Notice]) -> None:
        self.settle()
        if not on:
            first_clear = name not in self.seen_clear
            self.seen_clear.add(name)
            self._cleared(name, first_clear)
            return
        if name in self.active:
            return
        began, since, _ = self.began.get(name, (self.clock(), self.now(), notice))
        self.began[name] = (began, since, notice)  # its latest words (the last error)
        if self.clock() - began < self._after(name):
            return  # not told yet: told by a judgement or a tick once it has lasted
        if self._due(name):
            del self.began[name]
            self.active.add(name)
            self.resolving.pop(name, None)  # its earlier resolve's fate no longer matters
            told = notice()
            self.opened_at[name] = told.at.isoformat()
            self._tell(dataclasses.replace(told, suppressed=self.held.get(name, 0), since=since))
            self._remember()
        else:
            self.held[name] = self.held.get(name, 0) + 1

    def _cleared(self, name: str, first_clear: bool) -> None:
        """``name`` judged clear: its resolve if it was told; nothing if it never was (one
        that cleared before its minimum is counted and said in the log). With close_stale (no
        state file says what an earlier run left open), the first time this run finds it clear
        also resolves what an earlier run may have left open — even when this run first found
        it on (a restart during an outage)."""
        pending = self.began.pop(name, None)
        if pending is not None and name not in self.active:
            self.quiet += 1
            took = durations.human(self.clock() - pending[0])
            self.log(
                f"notify: {name} cleared after {took}, before --notify-after "
                f"{durations.human(self._after(name))}: not told ({self.quiet} so far)"
            )
        if first_clear and self.close_stale and name not in self.active:
            self.send(self._notice("resolved", f"{name.replace('_', ' ')} clear", condition=name))
        elif name in self.active:
            self.active.discard(name)
            at = self.opened_at.pop(name, "")
            resolve = self._notice("resolved", f"{name.replace('_', ' ')} cleared", condition=name)
            if self.store is None:
                self.send(resolve)
            else:  # listed until delivered (``settle``)
                self.resolving[name] = (at, resolve)
                self.send(resolve, delivered=lambda ok: self._delivered(name, resolve, ok))
            self._remember()
            return
        if first_clear and not self.known:
            self._remember()

    def due_in(self) -> float | None:
        """Seconds until a condition not told yet comes due (its minimum lasted, and its rate
        limit past), by the watch's clock; None when none waits."""
        if not self.began:
            return None
        return max(0.0, min(self._due_at(name) for name in self.began) - self.clock())

    def _due_at(self, name: str) -> float:
        began = self.began[name][0] + self._after(name)
        last = self.last_sent.get(name)
        return began if last is None else max(began, last + self.interval_s)

    def tick(self) -> None:
        """Tells each condition that has lasted its minimum since its last judgement (still
        on as last judged: the service calls this while it waits, between judgements)."""
        self.settle()
        for name in [n for n in self.began if self._due_at(n) <= self.clock()]:
            self._condition(name, True, self.began[name][2])

    def burst_seen(self, expired: int, ids: Sequence[Any] = ()) -> None:
        """``expired`` leases found expired at once (a pass, a refresh of stuck --watch)."""
        self._condition(
            "expiry_burst",
            expired >= self.burst,
            lambda: self._notice(
                "expiry_burst",
                f"{expired} leases expired at once (workers died together?)",
                counts={"expired": expired, "threshold": self.burst},
                ids=[str(i) for i in ids],
                next=[f"{self.prefix}summary", f"{self.prefix}stuck"],
            ),
        )

    def review_seen(self, waiting: int) -> None:
        self._condition(
            "review_waiting",
            waiting > 0,
            lambda: self._notice(
                "review_waiting",
                f"{waiting} job(s) wait for a human decision",
                counts={"awaiting_review": waiting},
                next=[f"{self.prefix}review"],
            ),
        )

    def pass_done(
        self,
        review: Callable[[], int] | None = None,
        pauses: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        """The end of a reclaimer pass: a burst judged, the review count read (at most every
        REVIEW_EVERY_S), the pauses (each pass: a probe of jobctl.pauses, a count of queued
        jobs only while something is paused), what is due told, a down database's resolved."""
        self.down_seen(None)
        self.burst_seen(self.pass_rows, self.pass_ids)
        self.pass_rows, self.pass_ids = 0, []
        try:  # a failed read: the next pass reads it again
            if review is not None and self.clock() - self.last_review >= REVIEW_EVERY_S:
                self.last_review = self.clock()
                self.review_seen(review())
            if pauses is not None:
                self.pauses_seen(pauses())
        except errors.JobctlError:
            pass
        self._flush()

    def pauses_seen(self, pauses: Sequence[dict[str, Any]]) -> None:
        """The table's pauses now (``ops.pause.waiting``): each new one told ``paused``, each
        gone ``resumed`` (an operator's act: each told, no rate limit). The run's first read
        only learns them: what was paused before it started is not news (a restart would
        tell every pause again)."""
        now = {(p["dimension"], p["value"], str(p.get("paused_at"))): dict(p) for p in pauses}
        before, self.pauses = self.pauses, now
        if before is None:
            return
        for key, p in before.items():  # gone first: a pause lifted and set again is both
            if key not in now:
                if isinstance(p.get("paused_at"), dt.datetime):
                    p["paused_s"] = (self.now() - p["paused_at"]).total_seconds()
                self._paused("resumed", p, [f"{self.prefix}summary"])
        for key, p in now.items():
            if key not in before:
                flag = safe_text.visible(f"--{p['dimension']}={shlex.quote(str(p['value']))}")
                nxt = [f"{self.prefix}pause --list", f"{self.prefix}resume {flag} --reason TEXT"]
                self._paused("paused", p, nxt)

    def _paused(self, event: str, p: dict[str, Any], nxt: list[str]) -> None:
        summary = notifications.pause_summary(event, p)
        detail = notifications.pause_detail(p)
        counts = {"waiting": detail["waiting"]} if event == "paused" else {}
        self.send(self._notice(event, summary, pause=detail, next=nxt, counts=counts))

    def down_seen(self, message: str | None) -> None:
        """The database did not answer (``message``), or did again (None)."""
        self._condition(
            "target_down",
            message is not None,
            lambda: self._notice(
                "target_down",
                f"the database does not answer: {message}",
                next=[f"{self.prefix}targets --check" if self.target else f"{self.prefix}summary"],
            ),
        )

    def stopped(self, message: str) -> None:
        """The reclaimer stopped on an error it does not retry."""
        self._tell(
            self._notice(
                "reclaimer_error",
                f"the reclaimer stopped: {message}",
                next=["journalctl -u jobctl-reclaimer", f"{self.prefix}schema check"],
            )
        )
