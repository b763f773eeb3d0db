"""Notifications' delivery (``Sender``): off the reclaim's path, each webhook with a bounded
queue and a thread of its own, each POST within one deadline and retried with backoff. A
webhook that hangs, drips its answer or answers 500 never delays a reclaim nor another
webhook: the service only puts a notice in each queue (never blocking; a full queue drops
the notice, said in the log), and every failure is one line in the log the moment it is
given up. What is worth telling is ``notify``'s ``Watch``.
"""

from __future__ import annotations

import base64
import http.client
import queue
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence

from jobctl.contract import safe_text
from jobctl.ops import notify_urls
from jobctl.render import notifications
from jobctl.render.notifications import Notice

TIMEOUT_S = 5.0  # one POST, whole: name lookup, connect, send and the full answer
RETRIES = 3  # attempts after the first, on a connection error, a 429 or a 5xx
BACKOFF_S = 1.0  # before the first retry; doubled each time
QUEUE_SIZE = 100  # notices waiting for one webhook; a full queue drops the new one
ANSWER_BYTES = 65536  # what is read of a webhook's answer at most


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
        return why(exc)
    finally:
        conn.close()


def why(exc: BaseException) -> str:
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
class _Outcome:
    """One notice's fate across every webhook: ``delivered`` called once, on the thread of
    the last webhook to report, with True when each delivered it, False when one gave it up
    or dropped it. A webhook still holding it when the sender closes never reports: never
    called."""

    def __init__(self, webhooks: int, delivered: Callable[[bool], None]) -> None:
        self.lock, self.waiting, self.ok, self.delivered = (
            threading.Lock(),
            webhooks,
            True,
            delivered,
        )

    def report(self, ok: bool) -> None:
        with self.lock:
            self.waiting -= 1
            self.ok = self.ok and ok
            done = self.waiting == 0
        if done:
            self.delivered(self.ok)


class _Receiver:
    """One webhook: its own bounded queue and thread, so that one that hangs never delays
    another's notices; what it delivered, failed and dropped."""

    def __init__(self, url: str, fmt: str, owner: Sender) -> None:
        self.url, self.fmt, self.owner, self.name = url, fmt, owner, notify_urls.shown(url)
        self.change_url = notifications.change_url(url) if fmt == "pagerduty" else None
        self.pending: queue.Queue[tuple[Notice, _Outcome | None] | None] = queue.Queue(
            maxsize=owner.queue_size
        )
        self.sent = self.failed = self.dropped = 0
        self.busy = False  # a notice is being posted
        self.thread = threading.Thread(target=self._run, name="jobctl-notify", daemon=True)
        self.thread.start()

    def put(self, notice: Notice, outcome: _Outcome | None = None) -> None:
        try:
            self.pending.put_nowait((notice, outcome))
        except queue.Full:
            self.dropped += 1
            self.owner.log(
                f"notify: queue full for {self.name} ({self.pending.maxsize} waiting): "
                f"{notice.event} dropped ({self.dropped} so far)"
            )
            if outcome is not None:
                outcome.report(False)

    def _run(self) -> None:
        while True:
            item = self.pending.get()
            if item is None:
                return
            notice, outcome = item
            self.busy = True
            try:
                delivered = self._deliver(notice)
            except Exception as exc:  # never let one notice end the webhook's thread
                self.owner.log(f"notify: {notice.event} to {self.name} failed: {why(exc)}")
                delivered = False
            finally:
                self.busy = False
            if delivered is True:
                self.sent += 1
            elif delivered is False:
                self.failed += 1
            if outcome is not None:  # not for this webhook (None): nothing owed
                outcome.report(delivered is not False)

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

    def send(self, notice: Notice, delivered: Callable[[bool], None] | None = None) -> None:
        """``notice`` in each webhook's queue; ``delivered``, when given, told its fate once
        every webhook has (``_Outcome``: on a webhook's thread, never if one still holds it
        when the sender closes)."""
        outcome = None
        if delivered is not None:
            if not self.receivers:
                delivered(True)
            outcome = _Outcome(len(self.receivers), delivered)
        for r in self.receivers:
            r.put(notice, outcome)

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
