"""A real local HTTP server standing in for a webhook (http.server in a thread): it records
each POST, and answers as told: 200, 500, never (it holds the request until stopped),
drip (its answer one byte every ``drip_s``, so no single read ever waits long), or as
PagerDuty's Events API v2 does (``pagerduty``: incidents kept by ``dedup_key``)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
SEVERITIES = ("critical", "error", "warning", "info")


class Hook:
    def __init__(self, behaviour: str, drip_s: float = 1.0) -> None:
        self.behaviour = behaviour  # "ok", "500", "hang", "drip", "pagerduty"
        self.drip_s = drip_s
        self.received: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str | None]] = []  # (request target, Authorization)
        self.attempts = 0
        self.release = threading.Event()
        self.url = ""
        self.lock = threading.Lock()
        # pagerduty: each dedup_key's incident ("open" or "resolved"), every alert event in
        # order (action, dedup_key, class), the Change Events, and what was refused
        self.incidents: dict[str, str] = {}
        self.alerts: list[tuple[str, str, str]] = []
        self.changes: list[dict[str, Any]] = []
        self.refused: list[str] = []

    def open_incidents(self) -> list[str]:
        with self.lock:
            return sorted(k for k, state in self.incidents.items() if state == "open")

    def take(self, path: str, body: dict[str, Any]) -> int:
        """PagerDuty's side of one POST: the HTTP status it answers."""
        with self.lock:
            if path == "/v2/change/enqueue":
                payload = body.get("payload") or {}
                if not (
                    body.get("routing_key") and payload.get("summary") and payload.get("source")
                ):
                    self.refused.append(f"change without routing_key/summary/source: {body}")
                    return 400
                self.changes.append(body)
                return 202
            if path != "/v2/enqueue":
                return 404
            action, key = body.get("event_action"), body.get("dedup_key")
            if not body.get("routing_key") or action not in ("trigger", "acknowledge", "resolve"):
                self.refused.append(f"event without routing_key or action: {body}")
                return 400
            if action == "trigger":
                payload = body.get("payload") or {}
                if payload.get("severity") not in SEVERITIES or not payload.get("summary"):
                    self.refused.append(f"trigger without severity/summary: {body}")
                    return 400
                if not key:
                    self.refused.append(f"trigger without dedup_key (never resolvable): {body}")
                    return 400
                self.incidents[key] = "open"
                self.alerts.append((action, key, str(payload.get("class"))))
            else:
                if key in self.incidents:
                    self.incidents[key] = "resolved" if action == "resolve" else "open"
                self.alerts.append((action, str(key), ""))
            return 202


@contextlib.contextmanager
def webhook(behaviour: str = "ok", drip_s: float = 1.0) -> Iterator[Hook]:
    hook = Hook(behaviour, drip_s)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            hook.attempts += 1
            hook.requests.append((self.path, self.headers.get("Authorization")))
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.close_connection = True
            if hook.behaviour == "hang":
                hook.release.wait(60)
                return
            if hook.behaviour == "drip":  # the whole answer, status line first, byte by byte
                for byte in ANSWER:
                    if hook.release.wait(hook.drip_s):
                        return
                    self.wfile.write(bytes([byte]))
                hook.received.append(json.loads(body))
                return
            if hook.behaviour == "500":
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if hook.behaviour == "pagerduty":
                status = hook.take(self.path, json.loads(body))
                self.send_response(status)
                answer = b'{"status":"success"}' if status == 202 else b'{"status":"invalid"}'
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                return
            hook.received.append(json.loads(body))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    path = "/v2/enqueue" if behaviour == "pagerduty" else "/hooks/SECRET-PATH"
    hook.url = f"http://127.0.0.1:{port}{path}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        hook.release.set()
        server.shutdown()
        server.server_close()
