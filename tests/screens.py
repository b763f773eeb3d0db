"""The on-call's screen: an incident staged in a database, and jobctl run on a pseudo-terminal
of a given size, read back as the screen a person sees (pyte, a VT100 emulator).

Used by tests/system/test_screen.py and, as a script, to capture the screens quoted in
docs/reference/screens.md (so the docs show the terminal as it really looks, never hand-written)::

    JOBCTL_TEST_DSN='host=127.0.0.1 user=postgres dbname=postgres' python tests/screens.py
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from jobctl import lease

ROOT = Path(__file__).resolve().parents[1]
WORKERS = [f"api-worker-{n}.prod.internal" for n in range(1, 5)]


# ---------------------------------------------------------------- the incident
def stage(dsn: str) -> dict[str, Any]:
    """A deploy that killed three workers: 12 expired leases (9 auto, 2 manual, 1 out of
    attempts) held by workers named like ``api-worker-1.prod.internal``, 4 live leases about
    to run out, a job reclaimed once and claimed again, and a manual job reclaim parked."""
    with psycopg.connect(dsn, autocommit=True) as c:

        def add(count: int, policy: str = "auto", max_attempts: int = 3) -> list[Any]:
            rows = c.execute(
                "INSERT INTO jobs (recovery_policy, max_attempts) "
                "SELECT %s, %s FROM generate_series(1, %s) RETURNING id",
                (policy, max_attempts, count),
            ).fetchall()
            return [r[0] for r in rows]

        def claim(count: int, worker: str, lease_s: float) -> list[lease.Claim]:
            w = lease.Worker(c, worker, lease_seconds=lease_s)
            return [job for job in (w.claim() for _ in range(count)) if job is not None]

        def reclaim(ids: list[Any]) -> None:
            args = ["reclaim", "--commit", "--yes"]
            for job_id in ids:
                args += ["--id", str(job_id)]
            subprocess.run(
                [sys.executable, "-m", "jobctl", *args],
                env={**os.environ, "JOBCTL_DSN": dsn},
                capture_output=True,
                check=True,
            )

        parked = add(1, policy="manual")  # reclaimed into failed, awaiting a human
        claim(1, WORKERS[3], -60)
        reclaim(parked)
        again = add(1)  # reclaimed once, then claimed again by another worker
        claim(1, WORKERS[1], -900)
        reclaim(again)
        claim(1, WORKERS[0], -320)
        add(6)
        claim(3, WORKERS[0], -320)
        claim(3, WORKERS[1], -7300)
        add(2, policy="manual")
        claim(2, WORKERS[2], -45)
        add(1, max_attempts=1)
        claim(1, WORKERS[2], -50)
        add(2)
        claim(2, WORKERS[0], -15)
        add(4)
        claim(4, WORKERS[3], 240)  # live, expiring within 5m
        c.execute(  # the workers heartbeat until they died, 20 s before their leases ran out
            "UPDATE jobs SET reserved_at = least(now(), lease_expires_at - interval '60 s'), "
            "heartbeat_at = least(now(), lease_expires_at - interval '20 s') "
            "WHERE status = 'processing' AND reclaim_count = 0"
        )
        token = c.execute("SELECT attempt_token FROM jobs WHERE id = %s", again).fetchone()
    return {"parked": parked[0], "again": again[0], "token": str(token[0] if token else "")}


# ---------------------------------------------------------------- the terminal
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])")


@dataclasses.dataclass
class Screen:
    code: int
    lines: list[str]  # the screen's lines, trailing blanks removed
    raw: str  # every byte written, decoded (a byte that is not UTF-8 as U+FFFD)
    written: bytes  # every byte written, as written

    @property
    def text(self) -> str:
        return "\n".join(self.lines).rstrip("\n")

    def written_lines(self) -> list[str]:
        """The lines as written, escape sequences removed: what the program sent between
        newlines (a line longer than the terminal would have wrapped on the screen)."""
        text = _ESCAPE.sub("", self.raw).replace("\r\n", "\n")
        lines = []
        for line in text.split("\n"):
            lines.append(line.split("\r")[-1])  # a carriage return starts the line again
        return lines


def on_terminal(
    args: list[str],
    *,
    columns: int = 80,
    rows: int = 24,
    dsn: str | None = None,
    answer: str | None = None,
    interrupt_at: bytes | None = None,
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
    screen_rows: int | None = None,
    timeout: float = 30.0,
    stdin_terminal: bool = True,
    while_asked: Any = None,
) -> Screen:
    """Run ``jobctl args`` with stdin, stdout and stderr on a pty of ``columns`` x ``rows``
    (stdin not a terminal if not ``stdin_terminal``: /dev/null); type ``answer`` at
    its [y/N] prompt, or press Ctrl-C when ``interrupt_at`` shows. ``while_asked``: called
    once the prompt shows, before the answer is typed (what happens while a person reads)."""
    import pyte

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    environment = {**os.environ, "TERM": "xterm-256color"}
    for name in ("NO_COLOR", "COLUMNS", "LINES", "FORCE_COLOR", *unset):
        environment.pop(name, None)
    environment.update(env or {})
    if dsn is not None:
        environment["JOBCTL_DSN"] = dsn
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", *args],
        stdin=follower if stdin_terminal else subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=environment,
        close_fds=True,
        start_new_session=True,
        preexec_fn=_as_a_shell_starts_a_job,
    )
    os.close(follower)
    seen, acted, deadline = b"", answer is None and interrupt_at is None, time.monotonic() + timeout
    shown = 0.0  # when interrupt_at first showed
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        if not acted and answer is not None and b"[y/N]" in seen:
            if while_asked is not None:
                while_asked()
            os.write(leader, f"{answer}\n".encode())
            acted = True
        if not acted and interrupt_at is not None and interrupt_at in seen:
            # Ctrl-C, as the terminal's line discipline sends it, once the prompt has been on
            # screen for a moment, as a person would press it. Sent the instant the prompt's
            # text shows, it can land inside input() before its read() starts: CPython's
            # handler then only sets a flag, read() never sees EINTR, and the prompt waits on.
            shown = shown or time.monotonic()
            if time.monotonic() - shown >= 0.3:
                os.write(leader, b"\x03")
                acted = True
        if proc.poll() is not None and not ready:
            break
    os.close(leader)
    if proc.poll() is None:
        proc.kill()
    code = proc.wait(timeout=10)
    screen = pyte.Screen(columns, screen_rows or rows)
    screen.set_mode(pyte.modes.LNM)  # a newline also returns the carriage, as the tty does
    stream = pyte.ByteStream(screen)
    stream.feed(seen)
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return Screen(code, lines, seen.decode(errors="replace"), seen)


def _as_a_shell_starts_a_job() -> None:
    """In the child, before exec: the pty its controlling terminal, and SIGINT at its default
    and unblocked, as an interactive shell starts a foreground job. A test run started in the
    background by a non-interactive shell (``bash .ci/run &``) inherits SIGINT ignored, and an
    ignored signal stays ignored across exec: Ctrl-C at the prompt would then do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    fcntl.ioctl(1, termios.TIOCSCTTY, 0)  # stdout: the pty, even when stdin is not


def scrolled(args: list[str], **kwargs: Any) -> Screen:
    """Like ``on_terminal``, read on a screen tall enough that nothing scrolls away (what a
    person would scroll back to see)."""
    kwargs.setdefault("screen_rows", 300)
    return on_terminal(args, **kwargs)


# ---------------------------------------------------------------- the docs
COMMANDS: list[tuple[list[str], str | None]] = [  # the command, the answer at its prompt
    (["stuck"], None),
    (["stuck", "--expiring-within", "5m"], None),
    (["stuck", "--expiring-within", "5m", "--watch", "--count", "1"], None),
    (["stuck", "-o", "wide"], None),
    (["summary"], None),
    (["reclaim", "--dry-run"], None),
    (["show", "{again}"], None),
    (["history", "{again}"], None),
    (["explain", "{again}"], None),
    (["explain", "{parked}"], None),
    (["review"], None),
    (["quarantine", "--min-reclaims", "1"], None),
    (["schema", "check"], None),
    (["events"], None),
    (["requeue", "{parked}", "--reason", "checked: safe to retry"], "n"),
    (["reclaim", "--commit"], "y"),
    (["requeue"], None),
    ([], None),
]
SIZES = [(80, 24), (120, 40)]


@contextlib.contextmanager
def incident_database(server_dsn: str) -> Iterator[tuple[str, dict[str, Any]]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import dsn_for

    from jobctl import db
    from jobctl.schema import apply as schema_apply
    from jobctl.schema import steps as schema_steps

    name = "jobctl_screens"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    dsn = dsn_for(server_dsn, name)
    try:
        settings = db.Settings(dsn=dsn)
        with db.connect(settings) as conn:
            schema_steps.apply(conn, settings, schema_apply.plan_apply(conn, "jobs", create=True))
        yield dsn, stage(dsn)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


README_SCREENS = {"stuck 80": (["stuck"], 80), "history 80": (["history", "{again}"], 80)}


def fill_readme(readme: Path, shots: dict[str, str]) -> None:
    """The README's ``<!-- screen: NAME -->`` blocks, filled with the captured screens."""
    text = readme.read_text()
    for name, shot in shots.items():
        text = re.sub(
            rf"(<!-- screen: {name} -->\n```\n).*?(```\n)",
            lambda m, shot=shot: m.group(1) + shot + "\n" + m.group(2),
            text,
            flags=re.DOTALL,
        )
    readme.write_text(text)


def capture(server_dsn: str, target: Path) -> None:
    """Every command's screen at 80 and 120 columns, written to ``target`` (markdown), and
    the README's tour screens."""
    readme: dict[str, str] = {}
    parts = [
        "# jobctl on a terminal",
        "",
        "Every command's screen as it looks in a terminal of 80 and of 120 columns, captured",
        "from a pseudo-terminal by `tests/screens.py` on a staged incident (a deploy that",
        "killed three workers named like `api-worker-1.prod.internal`), not written by hand.",
        "Piped, and with `-o json|jsonl|csv|tsv`, the output is the wide, stable format of",
        "[commands.md](../commands.md). Regenerate with",
        "`JOBCTL_TEST_DSN=... python tests/screens.py`.",
    ]
    for columns, rows in SIZES:
        parts += ["", f"## {columns} columns"]
        with incident_database(server_dsn) as (dsn, ids):
            for command, answer in COMMANDS:
                args = [a.format(**ids) for a in command]
                if "--watch" in args:  # the screen itself: what fits in it
                    shot = on_terminal(args, columns=columns, rows=rows, dsn=dsn)
                else:  # the lines as written: a person scrolls back
                    shot = scrolled(args, columns=columns, rows=rows, dsn=dsn, answer=answer)
                typed = " ".join(a if " " not in a else f'"{a}"' for a in args)
                shown = f"$ jobctl {typed}".rstrip()
                parts += ["", f"`{shown}` (exit {shot.code})", "", "```", shot.text, "```"]
                for name, (wanted, width) in README_SCREENS.items():
                    if width == columns and args == [a.format(**ids) for a in wanted]:
                        readme[name] = f"$ {shown[2:]}\n{shot.text}"
    fill_readme(ROOT / "README.md", readme)
    target.write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    capture(
        os.environ.get("JOBCTL_TEST_DSN", "host=127.0.0.1 user=postgres dbname=postgres"),
        ROOT / "docs" / "reference" / "screens.md",
    )
