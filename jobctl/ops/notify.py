"""Notifications from the reclaimer (``reclaim --every``) and ``stuck --watch``: what is worth
telling (``Watch``: conditions, their ``resolved``, a rate limit per condition) and its
delivery (``Sender``: off the reclaim's path, each webhook with a bounded queue and a thread
of its own, each POST within one deadline and retried with backoff). A webhook that hangs,
drips its answer or answers 500 never delays a reclaim nor another webhook: the service only
puts a notice in each queue (never blocking; a full queue drops the notice, said in the
log), and every failure is one line in the log the moment it is given up. The payloads are
``render.notifications``'; where the URLs come from, and which are refused, is
``notify_urls``'.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import http.client
import json
import os
import queue
import shlex
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jobctl import durations, errors
from jobctl.contract import safe_text
from jobctl.ops import notify_urls
from jobctl.render import notifications
from jobctl.render.notifications import Notice

TIMEOUT_S = 5.0  # one POST, whole: name lookup, connect, send and the full answer
RETRIES = 3  # attempts after the first, on a connection error, a 429 or a 5xx
BACKOFF_S = 1.0  # before the first retry; doubled each time
QUEUE_SIZE = 100  # notices waiting for one webhook; a full queue drops the new one
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
ANSWER_BYTES = 65536  # what is read of a webhook's answer at most

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


# ---------------------------------------------------------------- one POST, one deadline
def post(url: str, data: bytes, timeout_s: float, headers: dict[str, str]) -> str | None:
    """POST ``data`` to ``url``: None when delivered (any 2xx), else why not, in a few words.
    ``timeout_s`` bounds the whole exchange (name lookup, connect, TLS, send, the full
    answer), not each read: a socket timeout alone lets a receiver that drips one byte a
    second hold the POST for ever. The exchange runs in a thread of its own; at the deadline
    its socket is shut (which ends any read or write at once) and the POST counts as failed,
    whatever the thread is still doing (a name lookup ends on its own)."""
    made: dict[str, str | None] = {}
    conn = _connection(url, timeout_s + 1.0)  # the socket's own timeout: a backstop only
    exchange = threading.Thread(
        target=lambda: made.update(why=_exchange(conn, url, data, headers)),
        name="jobctl-notify-post",
        daemon=True,
    )
    exchange.start()
    exchange.join(timeout_s)
    if exchange.is_alive() or "why" not in made:
        _abort(conn)
        return f"no complete answer within {timeout_s:g}s"
    return made["why"]


def _connection(url: str, timeout_s: float) -> http.client.HTTPConnection:
    """The connection for ``url``: direct, or through the proxy that ``http_proxy``/
    ``https_proxy`` name (``no_proxy`` honoured), as urllib would."""
    parts = urllib.parse.urlsplit(url)
    host, https = parts.hostname or "", parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        via = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        proxy_host, proxy_port = via.hostname or "", via.port or 8080
        if not https:  # a plain proxy takes the absolute URL (see _exchange)
            return http.client.HTTPConnection(proxy_host, proxy_port, timeout=timeout_s)
        tunnel = http.client.HTTPSConnection(
            proxy_host, proxy_port, timeout=timeout_s, context=ssl.create_default_context()
        )
        tunnel.set_tunnel(host, port)
        return tunnel
    if https:
        return http.client.HTTPSConnection(
            host, port, timeout=timeout_s, context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(host, port, timeout=timeout_s)


def _exchange(
    conn: http.client.HTTPConnection, url: str, data: bytes, headers: dict[str, str]
) -> str | None:
    parts = urllib.parse.urlsplit(url)
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    if conn.host != parts.hostname and not isinstance(conn, http.client.HTTPSConnection):
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
        target = urllib.parse.urlunsplit((parts.scheme, netloc, target, "", ""))  # no user
    sent = dict(headers)
    if parts.username is not None:  # user:password@host: HTTP basic authentication
        user = urllib.parse.unquote(parts.username)
        word = urllib.parse.unquote(parts.password or "")
        sent["Authorization"] = "Basic " + base64.b64encode(f"{user}:{word}".encode()).decode()
    try:
        conn.request("POST", target, body=data, headers=sent)
        answer = conn.getresponse()
        answer.read(ANSWER_BYTES)
        if 200 <= answer.status < 300:
            return None
        return f"HTTP {answer.status}"
    except TimeoutError:
        return "no complete answer (timed out)"
    except Exception as exc:  # whatever the client raises is this POST's failure, said
        return _why(exc)
    finally:
        conn.close()


def _why(exc: BaseException) -> str:
    """An exception in a few words, never the URL: its class and, for an OS error, its
    reason (``Connection refused``)."""
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {safe_text.visible(exc.reason or type(exc).__name__)}"
    if isinstance(exc, OSError) and exc.strerror:
        return safe_text.visible(exc.strerror)
    return type(exc).__name__


def _abort(conn: http.client.HTTPConnection) -> None:
    """Ends a POST past its deadline: its socket shut both ways (a blocked read or write
    returns at once), then closed."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# ---------------------------------------------------------------- delivery
class _Receiver:
    """One webhook: its own bounded queue and thread, so that one that hangs never delays
    another's notices; what it delivered, failed and dropped."""

    def __init__(self, url: str, fmt: str, owner: Sender) -> None:
        self.url, self.fmt, self.owner, self.name = url, fmt, owner, notify_urls.shown(url)
        self.change_url = notifications.change_url(url) if fmt == "pagerduty" else None
        self.pending: queue.Queue[Notice | None] = queue.Queue(maxsize=owner.queue_size)
        self.sent = self.failed = self.dropped = 0
        self.busy = False  # a notice is being posted
        self.thread = threading.Thread(target=self._run, name="jobctl-notify", daemon=True)
        self.thread.start()

    def put(self, notice: Notice) -> None:
        try:
            self.pending.put_nowait(notice)
        except queue.Full:
            self.dropped += 1
            self.owner.log(
                f"notify: queue full for {self.name} ({self.pending.maxsize} waiting): "
                f"{notice.event} dropped ({self.dropped} so far)"
            )

    def _run(self) -> None:
        while True:
            notice = self.pending.get()
            if notice is None:
                return
            self.busy = True
            try:
                delivered = self._deliver(notice)
            except Exception as exc:  # never let one notice end the webhook's thread
                self.owner.log(f"notify: {notice.event} to {self.name} failed: {_why(exc)}")
                delivered = False
            finally:
                self.busy = False
            if delivered is True:
                self.sent += 1
            elif delivered is False:
                self.failed += 1

    def _deliver(self, notice: Notice) -> bool | None:
        """True when delivered, False when given up (said), None when not for this webhook."""
        url = self.url
        if self.fmt == "pagerduty" and notifications.is_change(notice):
            if self.change_url is None:
                return None  # said when the sender started
            url = self.change_url
        data = notifications.body(notice, self.fmt, routing_key=self.owner.routing_key)
        return self._post(url, data, notice)

    def _post(self, url: str, data: bytes, notice: Notice) -> bool:
        owner = self.owner
        wait = owner.backoff_s
        for attempt in range(owner.retries + 1):
            why = owner.poster(url, data, owner.timeout_s, HEADERS)
            if why is None:
                return True
            # a receiver that held the POST past its deadline is not asked again for this
            # notice: its failure is said at once, and its queue moves on
            final = (
                attempt == owner.retries
                or why.startswith("no complete answer")
                or (why.startswith("HTTP 4") and why != "HTTP 429")
            )
            if not final and not owner.stopping.wait(wait):  # a stop ends the backoff at once
                wait *= 2
                continue
            owner.log(
                f"notify: {notice.event} to {self.name} failed after {attempt + 1} "
                f"attempt(s): {why}"
            )
            return False
        return False  # pragma: no cover


HEADERS = {"Content-Type": "application/json", "User-Agent": "jobctl"}


class Sender:
    """Posts notices to every URL, each from its own queue and thread; ``send`` never
    blocks."""

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
        poster: Callable[[str, bytes, float, dict[str, str]], str | None] = post,
    ) -> None:
        self.fmt, self.log, self.routing_key = fmt, log, routing_key
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.queue_size, self.poster = queue_size, poster
        self.stopping = threading.Event()
        self.receivers = [_Receiver(url, fmt, self) for url in urls]
        for r in self.receivers:
            if fmt == "pagerduty" and r.change_url is None:
                log(
                    f"notify: {r.name} is not an Events API URL (…/v2/enqueue): its routine "
                    "events (reclaimed, parked, reclaimer_error) are not sent, only its alerts"
                )

    @property
    def sent(self) -> int:
        return sum(r.sent for r in self.receivers)

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.receivers)

    @property
    def dropped(self) -> int:
        return sum(r.dropped for r in self.receivers)

    def delivery(self) -> tuple[int, int]:
        """Notices delivered, and failed or dropped, so far (per URL)."""
        return self.sent, self.failed + self.dropped

    def send(self, notice: Notice) -> None:
        for r in self.receivers:
            r.put(notice)

    def close(self, wait_s: float = 3.0) -> None:
        """Send what waits, for at most ``wait_s`` in all, then stop (daemon threads: a
        hanging webhook never holds the process past it)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(not r.pending.empty() for r in self.receivers):
            time.sleep(0.05)
        self.stopping.set()  # no more backoff: a POST under way ends by its deadline
        ended = []  # whether each receiver's queue holds its end (a full one cannot)
        for r in self.receivers:
            try:
                r.pending.put_nowait(None)
                ended.append(True)
            except queue.Full:
                ended.append(False)
        for r in self.receivers:
            r.thread.join(max(0.0, deadline - time.monotonic()))
        for r, end in zip(self.receivers, ended, strict=True):
            left = r.pending.qsize() - end + r.busy
            if r.thread.is_alive() and left > 0:  # still holding a POST: said, left behind
                self.log(
                    f"notify: stopping with {left} notice(s) undelivered: "
                    f"{r.name} is still being posted to"
                )


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
            self.log(f"notify: cannot write {self.path}: {_why(exc)}")


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
        return f"jobctl --target {self.target} " if self.target else "jobctl "

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
        self.store.write({self._key(n): self.opened_at[n] for n in sorted(self.active)})

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
            self.opened_at.pop(name, None)
            self.send(self._notice("resolved", f"{name.replace('_', ' ')} cleared", condition=name))
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
