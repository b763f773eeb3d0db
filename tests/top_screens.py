"""``jobctl top`` on a real pseudo-terminal, driven with keys and read back as the screen a
person sees (pyte): for tests/system/test_top_screen.py and, as a script, to capture the
screens quoted in docs/top.md (never hand-written)::

    JOBCTL_TEST_DSN='host=127.0.0.1 user=postgres dbname=postgres' python tests/top_screens.py
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]


class Console:
    """``jobctl top ARGS`` running on a pty of ``columns`` x ``rows``."""

    def __init__(
        self,
        args: list[str],
        dsn: str,
        columns: int = 80,
        rows: int = 24,
        *,
        env: dict[str, str] | None = None,
        before: Sequence[str] = (),
    ) -> None:
        import pyte

        self.leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        environment = {**os.environ, "TERM": "xterm-256color", "JOBCTL_DSN": dsn, **(env or {})}
        for name in ("NO_COLOR", "COLUMNS", "LINES", "FORCE_COLOR", "TEXTUAL"):
            environment.pop(name, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobctl", *before, "top", *args],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=environment,
            close_fds=True,
            start_new_session=True,
        )
        os.close(follower)
        self.screen = pyte.Screen(columns, rows)
        self.stream = pyte.ByteStream(self.screen)

    def pump(self, seconds: float = 0.1) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.leader], [], [], 0.02)
            if ready:
                try:
                    chunk = os.read(self.leader, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.stream.feed(chunk)

    @property
    def text(self) -> str:
        lines = [line.rstrip() for line in self.screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)

    def wait_for(self, wanted: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.1)
            if wanted in self.text:
                self.pump(0.3)  # the rest of the frame
                return self.text
        raise AssertionError(f"{wanted!r} never showed; the screen:\n{self.text}")

    def press(self, keys: str, settle: float = 0.3) -> None:
        for key in keys:
            os.write(self.leader, key.encode())
            self.pump(0.05)
        self.pump(settle)

    def close(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.pump(0.1)
        if self.proc.poll() is None:
            self.proc.kill()
        os.close(self.leader)
        return self.proc.wait(timeout=10)


@contextlib.contextmanager
def console(
    args: list[str], dsn: str, columns: int = 80, rows: int = 24, **kwargs: Any
) -> Iterator[Console]:
    running = Console(args, dsn, columns, rows, **kwargs)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait(timeout=10)


def heartbeat(dsn: str, job_id: object) -> None:
    """Another session touches the job (a heartbeat): the row the screen read has changed."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "UPDATE jobs SET heartbeat_at = now(), "
            "lease_expires_at = lease_expires_at + interval '1 second' WHERE id = %s",
            (job_id,),
        )


def capture(server_dsn: str, target: Path) -> None:
    """docs/top.md's screens: each view, a detail, a requeue with a conflict (80x24)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from screens import incident_database

    shots: dict[str, str] = {}
    with incident_database(server_dsn) as (dsn, _ids):
        with console(
            ["--allow-writes", "--every", "1h", "--expiring-within", "5m"], dsn, 100, 30
        ) as top:
            shots["stuck 100"] = top.wait_for("1 stuck")
        with console(["--allow-writes", "--every", "1h", "--expiring-within", "5m"], dsn) as top:
            shots["stuck"] = top.wait_for("1 stuck")
            top.press("2")
            shots["review"] = top.wait_for("2 awaiting review")
            top.press("3")
            shots["summary"] = top.wait_for("jobs by status")
            top.press("1")
            top.wait_for("1 stuck")
            top.press("/api-worker-2\r")
            shots["filter"] = top.wait_for("filter api-worker-2")
            top.press("\x1b")
            top.press("\r")
            shots["detail"] = top.wait_for("attempts")
            top.press("\x1b")
            top.press("  ")
            first = _first_id(top.text)
            heartbeat(dsn, first)  # another session changes the first marked row
            top.press("r")
            top.wait_for("reason")
            top.press("checked: the deploy killed the workers\r")
            shots["confirm"] = top.wait_for("y goes")
            top.press("y")
            shots["conflict"] = top.wait_for("outcome per job")
            top.press("\x1b")
            top.press("?")
            shots["help"] = top.wait_for("jobctl top: keys")
            top.press("\x1b")
            top.press("q")
            top.close()
    parts = [open_text(), ""]
    titles = {
        "stuck 100": "View 1, stuck, at 100x30 (`jobctl top`)",
        "stuck": "View 1, stuck: expired leases, then those expiring soon (80x24)",
        "review": "View 2 (key `2`): jobs awaiting review",
        "summary": "View 3 (key `3`): the summary",
        "filter": "`/api-worker-2` Enter: the filter",
        "detail": "Enter: a job's detail (attempts with their tokens whole, events, explain)",
        "confirm": "space space, `r`, a reason: the confirmation",
        "conflict": "`y`: the outcome, a conflict where another session changed the row",
        "help": "`?` (or F1): the help screen",
    }
    for name, title in titles.items():
        parts += [f"### {title}", "", "```", shots[name], "```", ""]
    target.write_text(target.read_text().split(MARK)[0] + MARK + "\n\n" + "\n".join(parts))


MARK = "<!-- screens: captured by tests/top_screens.py -->"


def _first_id(text: str) -> str:
    for line in text.splitlines():
        cells = line.split()
        if len(cells) > 2 and cells[0] == "*" and cells[1].isdigit():
            return cells[1]
    raise AssertionError(f"no marked row on the screen:\n{text}")


def open_text() -> str:
    return (
        "Captured from a pseudo-terminal on the staged incident of `tests/screens.py` (a "
        "deploy that killed three workers), not written by hand; regenerate with "
        "`JOBCTL_TEST_DSN=... python tests/top_screens.py`."
    )


if __name__ == "__main__":
    capture(
        os.environ.get("JOBCTL_TEST_DSN", "host=127.0.0.1 user=postgres dbname=postgres"),
        ROOT / "docs" / "top.md",
    )
