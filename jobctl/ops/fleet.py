"""One command on one database or across several: run a read on every target at once
(bounded), each on its own connection, and keep what each gave or why it failed. One database
is a fleet of one (``once``, ``refreshed``): its read runs on the command's own session, what it
says is said at once and its failure is the command's (raised), as one database's always was.

A target that fails (down, no schema, a timeout) never stops the others: its outcome holds
the error, and the caller says it in one line. The lines a target's work says (a standby's
notice, say) are kept with its outcome, so that output comes out in the targets' order, not
in the order the servers answered. Example::

    outcomes = fleet.across(targets, lambda target, say: count_stuck(target.settings))
    for o in outcomes:
        print(o.target.name, o.value if o.error is None else o.error.message)
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from jobctl import db, errors
from jobctl.contract.shapes import Row
from jobctl.targets import Fleet, Target
from jobctl.targets import Where as Where  # one database (a fleet of one), or several

if TYPE_CHECKING:
    import concurrent.futures

    from jobctl.db.session import Session
    from jobctl.ops.sessions import Access
    from jobctl.ops.standby import Standing

T = TypeVar("T")
MAX_AT_ONCE = 16  # targets read at the same time, at most (one connection and thread each)
STOP_POLL_S = 0.2  # at Ctrl-C, how often the cancel is sent again until every target stops

Say = Callable[[str], None]
Read = Callable[["Session", "Standing", Say], T]


@dataclasses.dataclass
class Outcome(Generic[T]):
    """What one target gave (``value``), or why it failed (``error``), and what it said."""

    target: Target
    value: T | None = None
    error: errors.JobctlError | None = None
    said: list[str] = dataclasses.field(default_factory=list)
    standing: Standing | None = None  # one database: the server its session found

    @property
    def ok(self) -> bool:
        return self.error is None


Shown = Callable[[dt.datetime, list[Outcome[T]]], None]


@dataclasses.dataclass(frozen=True)
class Watching(Generic[T]):
    """``--watch``: a refresh every ``every``, ``count`` of them at most (None: until Ctrl-C);
    ``live()`` the view each refresh is shown in (the caller's), entered once the command can
    read (on one database: its session open)."""

    every: dt.timedelta
    count: int | None
    live: Callable[[], contextlib.AbstractContextManager[Shown[T]]]


def several(where: Where) -> bool:
    """Whether ``where`` is several targets, not one database."""
    return isinstance(where, Fleet)


def once(where: Where, access: Access, work: Read[T], *, say: Say) -> list[Outcome[T]]:
    """``work(session, standing, say)`` in a read-only transaction on every target of
    ``where`` at once, the outcomes in the targets' order. One database is a fleet of one: its
    session the command's, ``say`` told at once, a failure raised (its own exit code)."""
    if isinstance(where, Fleet):
        return read(where.targets, access, _in_transaction(work))
    from jobctl.ops import sessions

    with sessions.open(where, access, say=say) as (s, st), s.transaction(read_only=True):
        return [Outcome(_one(where), work(s, st, say), standing=st)]


def refreshed(
    where: Where, access: Access, work: Read[T], watching: Watching[T], *, say: Say
) -> list[Outcome[T]]:
    """``once`` again and again (``--watch``), each refresh shown with its time; the last
    refresh's outcomes. One database keeps its session and shows the database's time; several
    keep a session each (``KeptSessions``) and show this machine's."""
    from jobctl.ops import watch

    if not isinstance(where, Fleet):
        from jobctl.ops import sessions

        with sessions.open(where, access, say=say) as (s, st), watching.live() as show:
            one = _one(where)

            def produce() -> list[Outcome[T]]:
                return [Outcome(one, work(s, st, say), standing=st)]

            watch.watch(s, produce, show, every=watching.every, count=watching.count)
        return []
    last: list[Outcome[T]] = []
    kept = KeptSessions()

    def refresh() -> tuple[dt.datetime, list[Outcome[T]]]:
        last[:] = read(where.targets, access, _in_transaction(work), kept)
        return dt.datetime.now().astimezone(), last

    try:
        with watching.live() as show:
            watch.repeat(refresh, show, every=watching.every, count=watching.count)
    finally:
        kept.close()
    return last


def _in_transaction(work: Read[T]) -> Read[T]:
    def in_one(s: Session, st: Standing, say: Say) -> T:
        with s.transaction(read_only=True):
            return work(s, st, say)

    return in_one


def _one(settings: db.Settings) -> Target:
    """One database as the target of a fleet of one."""
    return Target(settings.target or "", settings, where="")


def across(
    targets: Sequence[Target],
    work: Callable[[Target, Say], T],
    *,
    at_once: int = MAX_AT_ONCE,
    busy: Busy | None = None,
) -> list[Outcome[T]]:
    """``work(target, say)`` on every target, ``at_once`` at a time; the outcomes in the
    targets' order. An error of jobctl's is the target's outcome; anything else (a bug) is
    too, as an internal error, so one target's surprise never loses the others' output.

    At Ctrl-C the queries running on ``busy``'s connections are cancelled and the targets
    not started never start: jobctl stops as soon as the servers answer the cancel (a target
    still connecting, within its connect timeout), not when the slowest query would end."""

    def one(target: Target) -> Outcome[T]:
        outcome: Outcome[T] = Outcome(target)
        try:
            if target.problem:  # one target's error, as a connection failure is (exit 1)
                raise errors.JobctlError(target.problem)
            outcome.value = work(target, outcome.said.append)
        except errors.JobctlError as exc:
            outcome.error = exc
        except Exception as exc:
            outcome.error = errors.JobctlError(f"internal error: {type(exc).__name__}: {exc}")
        return outcome

    if len(targets) == 1:
        return [one(targets[0])]
    import concurrent.futures  # (several targets only: every command imports this module)

    pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, min(at_once, len(targets))), thread_name_prefix="jobctl-target"
    )
    futures: list[concurrent.futures.Future[Outcome[T]]] = []
    try:
        futures.extend(pool.submit(one, target) for target in targets)
        return [future.result() for future in futures]
    except BaseException:  # Ctrl-C: stop what the targets are doing, then leave
        pool.shutdown(wait=False, cancel_futures=True)
        _stop(futures, busy)
        raise
    finally:
        pool.shutdown(wait=True)


def read(
    targets: Sequence[Target],
    access: Access,
    work: Read[T],
    kept: KeptSessions | None = None,
) -> list[Outcome[T]]:
    """``work(session, standing, say)`` on every target at once, each session opened by
    ``sessions.open`` as every command's is; on the ``kept`` sessions if given, else each on
    a new one. Ctrl-C cancels every target's statement (``Busy``)."""
    from jobctl.ops import sessions

    busy = Busy()

    def one(target: Target, say: Say) -> T:
        with contextlib.ExitStack() as working:  # the connection is Busy until the read ends

            def on_connect(conn: Any) -> None:
                working.enter_context(busy.using(conn))

            opened = sessions.open(
                target.settings, access, say=say, on_connect=on_connect, kept=kept
            )
            with opened as (s, st):
                return work(s, st, say)

    return across(targets, one, busy=busy)


def _stop(futures: Sequence[concurrent.futures.Future[Any]], busy: Busy | None) -> None:
    """Cancel what the targets run until all their work has ended: again every 0.2 s (a
    cancel that reaches a server between two statements is lost), a further Ctrl-C changing
    nothing (leaving with work still running would close its connections under it)."""
    import concurrent.futures

    started = [f for f in futures if not f.cancelled()]  # one cancelled is never "done"
    while True:
        try:
            if busy is not None:
                busy.cancel()
            if not concurrent.futures.wait(started, timeout=STOP_POLL_S).not_done:
                return
        except KeyboardInterrupt:
            continue


class Busy:
    """The connections the targets' work is using now, so that Ctrl-C can cancel their
    queries (``across``). Once cancelled, a connection that comes afterwards (its target was
    still connecting) is refused at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._using: set[Any] = set()
        self._sending: set[Any] = set()  # connections a cancel request is on its way to
        self._cancelled = False

    @contextlib.contextmanager
    def using(self, conn: Any) -> Iterator[None]:
        """``conn`` is working for a target until the block ends."""
        with self._lock:
            if self._cancelled:
                raise errors.JobctlError("interrupted")
            self._using.add(conn)
        try:
            yield
        finally:
            with self._lock:
                self._using.discard(conn)

    def cancel(self) -> None:
        """Ask each server to cancel what its connection runs: each request sent by a thread
        of its own (a server that never answers holds up only its own), and not again to a
        connection whose last request is still on its way. The requests are made while the
        connections are known open; a connection closed since has nothing left to stop."""
        with self._lock:
            self._cancelled = True
            requests = []
            for conn in self._using - self._sending:
                with contextlib.suppress(Exception):
                    requests.append((conn, conn.pgconn.get_cancel()))
            self._sending.update(conn for conn, _ in requests)
        for conn, request in requests:
            threading.Thread(target=self._send, args=(conn, request), daemon=True).start()

    def _send(self, conn: Any, request: Any) -> None:
        with contextlib.suppress(Exception):  # a server gone: nothing left to stop there
            request.cancel()
        with self._lock:
            self._sending.discard(conn)


class KeptSessions:
    """Each target's session kept from one read to the next (``--watch`` across targets: one
    connection a target, as a watch of one database keeps one). A read that fails closes its
    target's session; the next read opens a new one, so a target that went down is back as
    soon as it answers. Each target's session is used by one thread at a time."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[contextlib.ExitStack, Session]] = {}

    @contextlib.contextmanager
    def session(
        self, settings: db.Settings, on_connect: Callable[[Any], None] | None = None
    ) -> Iterator[Session]:
        """The session of the target of ``settings`` (opened if it has none); database errors
        inside become one line, as in ``session.open``; ``on_connect`` gets its connection,
        new or kept."""
        from jobctl.db import session

        name = settings.target or ""
        kept = self._open.get(name)
        again = on_connect if kept is not None else None  # a new one gets it as it connects
        if kept is None:
            with contextlib.ExitStack() as stack:
                opened = stack.enter_context(session.open(settings, on_connect))
                kept = self._open[name] = (stack.pop_all(), opened)
        try:
            if again is not None:
                again(kept[1].conn)
            with db.mapped_errors(settings.resolved_dsn()):
                yield kept[1]
        except BaseException:
            self._close(name)
            raise

    def close(self) -> None:
        for name in list(self._open):
            self._close(name)

    def _close(self, name: str) -> None:
        kept = self._open.pop(name, None)
        if kept is None:
            return
        stack, _ = kept
        with contextlib.suppress(Exception):  # a connection already lost closes as it can
            stack.close()


def failure_line(outcome: Outcome[Any]) -> str:
    """A failed target's one line (its password, if its message quotes one, redacted)."""
    return f"target {outcome.target.name}: {failure_message(outcome)}"


def failure_message(outcome: Outcome[Any]) -> str:
    """Why a target failed, on one line, its password redacted."""
    assert outcome.error is not None
    message = db.redact(outcome.error.message, outcome.target.settings.dsn)
    return " ".join(message.split())


def exit_code(outcomes: Iterable[Outcome[Any]]) -> int:
    """1 when any target failed (whatever its own code: refused, timed out, down), else 0:
    across targets, exit 1 says "the picture is partial" before anything else."""
    return errors.EXIT_ERROR if any(o.error is not None for o in outcomes) else errors.EXIT_OK


def tagged(name: str, rows: Iterable[Mapping[str, Any]]) -> Iterator[Row]:
    """Rows with the target's name first."""
    for row in rows:
        yield {"target": name, **row}
