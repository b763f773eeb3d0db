"""A real local HTTP server standing in for a webhook (http.server in a thread): it records
each POST, and answers as told: 200, 500, or never (it holds the request until stopped)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any


class Hook:
    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour  # "ok", "500", "hang"
        self.received: list[dict[str, Any]] = []
        self.attempts = 0
        self.release = threading.Event()
        self.url = ""


@contextlib.contextmanager
def webhook(behaviour: str = "ok") -> Iterator[Hook]:
    hook = Hook(behaviour)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hook.attempts += 1
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if hook.behaviour == "hang":
                hook.release.wait(60)
                return
            if hook.behaviour == "500":
                self.send_response(500)
                self.end_headers()
                return
            hook.received.append(json.loads(body))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/SECRET-PATH"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        hook.release.set()
        server.shutdown()
        server.server_close()
