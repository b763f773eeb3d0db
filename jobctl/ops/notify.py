"""Notifications from the reclaimer (``reclaim --every``) and ``stuck --watch``: what is worth
telling (``Watch``: conditions, their ``resolved``, a rate limit per condition) and its
delivery (``Sender``: off the reclaim's path, in a bounded queue and a thread of its own,
each POST with a timeout and retried with backoff). A webhook that hangs or answers 500
never delays a reclaim: the service only puts a notice in the queue (never blocking; a full
queue drops the notice, said in the log), and every failure is one line in the log.
The payloads are ``render.notifications``'.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import queue
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from jobctl import errors
from jobctl.render import notifications, safe_text
from jobctl.render.notifications import Notice

TIMEOUT_S = 5.0  # one POST, connect to last byte
RETRIES = 3  # attempts after the first, on a connection error, a timeout, a 429 or a 5xx
BACKOFF_S = 1.0  # before the first retry; doubled each time
QUEUE_SIZE = 100  # notices waiting to be sent; a full queue drops the new one
INTERVAL_S = 300.0  # a condition is told at most once per interval (the rest aggregated)
REVIEW_EVERY_S = 60.0  # how often the reclaimer counts the jobs waiting for review
BURST = 20  # expired leases in one pass (or one refresh of stuck --watch): expiry_burst


def check_url(url: str) -> str:
    """An http(s) URL with a host, or a usage error (exit 2) naming only its scheme."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise errors.UsageError(
            f"--notify: not an http(s) URL with a host (scheme {parts.scheme or 'none'!r})"
        )
    return url


def shown(url: str) -> str:
    """A URL as the log names it: scheme and host only (a webhook's path is its secret)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{':' + str(parts.port) if parts.port else ''}/…"


class Sender:
    """Posts notices to every URL from one thread; ``send`` never blocks."""

    def delivery(self) -> tuple[int, int]:
        """Notices delivered, and failed or dropped, so far (per URL)."""
        return self.sent, self.failed + self.dropped

    def __init__(
        self,
        urls: Sequence[str],
        fmt: str,
        *,
        log: Callable[[str], None],
        routing_key: str = "",
        timeout_s: float = TIMEOUT_S,
        retries: int = RETRIES,
        backoff_s: float = BACKOFF_S,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self.urls, self.fmt, self.log, self.routing_key = list(urls), fmt, log, routing_key
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.pending: queue.Queue[Notice | None] = queue.Queue(maxsize=queue_size)
        self.sent = self.failed = self.dropped = 0
        self.busy = ""  # the webhook being posted to, as the log names it
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="jobctl-notify", daemon=True)
        self.thread.start()

    def send(self, notice: Notice) -> None:
        try:
            self.pending.put_nowait(notice)
        except queue.Full:
            self.dropped += 1
            self.log(
                f"notify: queue full ({self.pending.maxsize} waiting): {notice.event} dropped"
                f" ({self.dropped} so far)"
            )

    def close(self, wait_s: float = 3.0) -> None:
        """Send what waits, for at most ``wait_s``, then stop (a daemon thread: a hanging
        webhook never holds the process past it)."""
        deadline = time.monotonic() + wait_s
        while not self.pending.empty() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stopping.set()
        try:
            self.pending.put_nowait(None)
        except queue.Full:
            pass
        self.thread.join(max(0.0, deadline - time.monotonic()))
        if self.thread.is_alive():  # a webhook still holding a POST: said, then left behind
            self.log(
                f"notify: stopping with {self.pending.qsize() + 1} notice(s) undelivered: "
                f"{self.busy} is still being posted to"
            )

    def _run(self) -> None:
        while True:
            notice = self.pending.get()
            if notice is None:
                return
            data = notifications.body(notice, self.fmt, routing_key=self.routing_key)
            for url in self.urls:
                if self._post(url, data, notice):
                    self.sent += 1
                else:
                    self.failed += 1

    def _post(self, url: str, data: bytes, notice: Notice) -> bool:
        self.busy = shown(url)
        wait = self.backoff_s
        for attempt in range(self.retries + 1):
            why = self._attempt(url, data)
            if why is None:
                return True
            final = attempt == self.retries or (why.startswith("HTTP 4") and "429" not in why)
            if not final and not self.stopping.wait(wait):  # a stop ends the backoff at once
                wait *= 2
                continue
            self.log(
                f"notify: {notice.event} to {shown(url)} failed after {attempt + 1} "
                f"attempt(s): {why}"
            )
            return False
        return False  # pragma: no cover

    def _attempt(self, url: str, data: bytes) -> str | None:
        """None when delivered (any 2xx), else why not, in a few words."""
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            url,
            data=data,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "jobctl"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                answer.read(65536)
                return None
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except TimeoutError:
            return f"no answer within {self.timeout_s:g}s"
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return safe_text.visible(str(reason))


class Watch:
    """What the service (or a watch) saw, turned into notices: one-shot events aggregated
    and told at most once per ``interval_s`` per condition; conditions told when they begin
    (again at most once per interval if they flap) and ``resolved`` when they clear."""

    def __init__(
        self,
        send: Callable[[Notice], None],
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
    ) -> None:
        self.send, self.table, self.target, self.command = send, table, target, command
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

    @property
    def prefix(self) -> str:
        return f"jobctl --target {self.target} " if self.target else "jobctl "

    def _notice(
        self, event: str, summary: str, *, condition: str | None = None, **kw: Any
    ) -> Notice:
        where = f"{self.table}" + (f" ({self.target})" if self.target else "")
        return Notice(
            event=event,
            condition=condition or event,
            summary=f"{where}: {safe_text.visible(summary)}",
            table=self.table,
            target=self.target,
            at=self.now(),
            host=self.host,
            command=self.command,
            **kw,
        )

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
    def _condition(self, name: str, on: bool, notice: Callable[[], Notice]) -> None:
        if on and name not in self.active:
            if self._due(name):
                self.active.add(name)
                self._tell(dataclasses.replace(notice(), suppressed=self.held.get(name, 0)))
            else:
                self.held[name] = self.held.get(name, 0) + 1
        elif not on and name in self.active:
            self.active.discard(name)
            self.send(self._notice("resolved", f"{name.replace('_', ' ')} cleared", condition=name))

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

    def pass_done(self, review: Callable[[], int] | None = None) -> None:
        """The end of a reclaimer pass: a burst judged, the review count read (at most every
        REVIEW_EVERY_S), what is due told, and a down database's resolved."""
        self.down_seen(None)
        self.burst_seen(self.pass_rows, self.pass_ids)
        self.pass_rows, self.pass_ids = 0, []
        if review is not None and self.clock() - self.last_review >= REVIEW_EVERY_S:
            self.last_review = self.clock()
            try:
                self.review_seen(review())
            except errors.JobctlError:
                pass  # the next pass reads it again
        self._flush()

    def down_seen(self, message: str | None) -> None:
        """The database did not answer (``message``), or did again (None)."""
        self._condition(
            "target_down",
            message is not None,
            lambda: self._notice(
                "target_down",
                f"the database does not answer: {message}",
                next=[f"{self.prefix}targets --check" if self.target else "jobctl summary"],
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
