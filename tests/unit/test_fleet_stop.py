"""Ctrl-C across targets (fleet.across, fleet.Busy), with connections that behave as a
server's do: a cancel request stops the statement running, and is lost when it arrives
between two statements. Ctrl-C is a real SIGINT sent to the main thread."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from jobctl import db, errors, targets
from jobctl.ops import fleet


class Server:
    """One target's server and connection: ``statement`` runs until cancelled (or
    ``lasts``); a cancel that comes while no statement runs does nothing, as PostgreSQL's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: threading.Event | None = None
        self.requests = 0
        self.cancelled = 0
        self.pgconn = self  # psycopg's conn.pgconn.get_cancel()

    def get_cancel(self) -> Server:
        return self

    def cancel(self) -> None:  # the cancel request, as the server gets it
        with self.lock:
            self.requests += 1
            if self.running is not None:
                self.running.set()

    def statement(self, lasts: float) -> None:
        with self.lock:
            self.running = stopped = threading.Event()
        try:
            if stopped.wait(lasts):
                self.cancelled += 1
                raise errors.JobctlError("canceling statement due to user request")
        finally:
            with self.lock:
                self.running = None


def _targets(*names: str) -> list[targets.Target]:
    return [targets.Target(n, db.Settings(dsn=f"dbname={n}", target=n), n) for n in names]


def ctrl_c_after(seconds: float, times: int = 1, gap: float = 0.3) -> threading.Thread:
    main = threading.main_thread().ident
    assert main is not None

    def press() -> None:
        time.sleep(seconds)
        for _ in range(times):
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(gap)

    presser = threading.Thread(target=press, daemon=True)
    presser.start()
    return presser


@pytest.fixture(autouse=True)
def python_handles_sigint():
    """Ctrl-C as KeyboardInterrupt (a run in the background may inherit SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_cancels_what_runs_even_between_statements_and_starts_nothing_more():
    """Two targets at a time out of four, each two statements of 30 s with a pause between:
    Ctrl-C during the first pause is lost on the server, so it is sent again until the
    second statement is cancelled too. The two queued targets never start."""
    busy, servers, started = fleet.Busy(), {}, []

    def work(target: targets.Target, say: fleet.Say) -> None:
        server = servers[target.name] = Server()
        started.append(target.name)
        with busy.using(server):
            time.sleep(0.5)  # between statements: Ctrl-C comes now
            server.statement(lasts=30)
            server.statement(lasts=30)

    ctrl_c_after(0.2)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        fleet.across(_targets("a", "b", "c", "d"), work, at_once=2, busy=busy)
    assert time.monotonic() - began < 10
    assert sorted(started) == ["a", "b"]
    for server in servers.values():
        assert server.cancelled == 1 and server.requests >= 2  # the first one was lost


def test_more_ctrl_c_still_wait_for_every_target_to_stop():
    """Leaving while a target's work runs would close its connection under it: a second and
    a third Ctrl-C change nothing, across returns once every target stopped."""
    busy, alive = fleet.Busy(), []

    def work(target: targets.Target, say: fleet.Say) -> None:
        server = Server()
        alive.append(target.name)
        try:
            with busy.using(server):
                server.statement(lasts=30)
        finally:
            time.sleep(1.2)  # rolling back, closing: outlives the other Ctrl-Cs
            alive.remove(target.name)

    ctrl_c_after(0.3, times=3, gap=0.3)
    with pytest.raises(KeyboardInterrupt):
        fleet.across(_targets("a", "b"), work, busy=busy)
    assert alive == []


def test_once_cancelled_a_connection_that_comes_is_refused():
    busy = fleet.Busy()
    busy.cancel()
    with pytest.raises(errors.JobctlError, match="interrupted"), busy.using(Server()):
        pass


def test_a_server_that_never_answers_holds_up_only_its_own_cancel():
    """The cancel request to a silent server blocks its own thread only; no second request
    is sent to it while the first is on its way; a closed connection is skipped."""

    class Silent(Server):
        def cancel(self) -> None:
            with self.lock:
                self.requests += 1
            time.sleep(30)

    class Closed(Server):
        def get_cancel(self) -> Server:
            raise RuntimeError("the connection is closed")

    busy, silent, answering = fleet.Busy(), Silent(), Server()
    with busy.using(silent), busy.using(answering), busy.using(Closed()):
        began = time.monotonic()
        busy.cancel()
        busy.cancel()
        assert time.monotonic() - began < 1
        time.sleep(0.2)
    assert silent.requests == 1 and answering.requests == 2
