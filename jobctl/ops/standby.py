"""Primary or standby: where a command is connected, what a standby's lag means for the
leases it shows, and refusing writes there early (docs/replicas.md). What a command had done
when it lost its server is ``ops/lost_server``'s; how a document read here is marked,
``render/replica_field``'s.

A hot standby replays its primary's WAL: its rows are the primary's as of some time ago (the
replay lag), judged against its own clock. A lease a worker extended on the primary within
the lag still shows its old expiry there, so ``stuck`` on a standby would call it expired. On a
standby every read command says so in one line on stderr, and the commands that judge leases
(``stuck``, ``reclaim --dry-run``) widen the judgement by the lag: a lease that expired less
than the lag ago is ``expiring``, not expired, unless the operator trusts the replica.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from jobctl import db, durations, errors
from jobctl.render import output, replica_field

if TYPE_CHECKING:
    import psycopg

    from jobctl.db.session import Session
    from jobctl.ops.triage import ExpiredFilter

# what to connect to instead, said with every refusal on a standby
PRIMARY_HINT = (
    "connect to the primary instead: a DSN with target_session_attrs=read-write finds it "
    "among several hosts (host=a,b)"
)


@dataclasses.dataclass(frozen=True)
class Standing:
    """The server a session is connected to: host and port, primary or standby, and a
    standby's replay state (``lag_s``: how far behind its rows may be, None when unknown)."""

    host: str
    port: str
    standby: bool = False
    paused: bool = False
    lag_s: float | None = 0.0
    replay_age_s: float | None = None
    receiving: bool = True  # a standby streaming from its primary (or one this role can't see)

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}" if self.port else self.host

    @property
    def role(self) -> str:
        return "standby" if self.standby else "primary"

    @property
    def margin(self) -> dt.timedelta:
        """How much older than now a lease must be to be called expired here: the lag."""
        return dt.timedelta(seconds=self.lag_s or 0.0) if self.standby else dt.timedelta(0)

    def info(self) -> dict[str, Any]:
        """The JSON field (``replica``) a read command's output carries on a standby."""
        return {
            "server": self.where,
            "standby": self.standby,
            "lag_s": None if self.lag_s is None else round(self.lag_s, 3),
            "replay_paused": self.paused,
            "receiving": self.receiving,
        }


def probe(conn: psycopg.Connection[Any]) -> Standing:
    """Where ``conn`` is, and, on a standby, how far behind (one catalog query)."""
    with db.safe(conn):  # on jobctl's search path, as every read
        row = db.row(conn, "replica_state")  # (dict rows, whatever the connection makes)
    assert row is not None
    return standing(str(conn.info.host), str(conn.info.port or ""), row)


def standing(host: str, port: str, row: Mapping[str, Any]) -> Standing:
    """The standing from a ``replica_state`` row. The lag is the age of the last replayed
    transaction, unless replay runs and has caught up with every WAL record received from a
    primary it streams from: then an idle primary, not a stale standby, is why that age grows,
    and the lag is 0. Unknown (None) when nothing was replayed since the standby started."""
    if not row["standby"]:
        return Standing(host, port)
    receiving = row["receiver"] in ("streaming", "hidden")
    age = row["replay_age_s"]
    if not row["paused"] and receiving and row["caught_up"]:
        lag: float | None = 0.0
    else:
        lag = None if age is None else max(0.0, float(age))
    return Standing(host, port, True, bool(row["paused"]), lag, age, receiving)


def seconds(value: float | None) -> str:
    return "an unknown time" if value is None else durations.human(value)


def notice(st: Standing, *, widened: bool) -> str | None:
    """The one stderr line a read command prints on a standby (None on a primary)."""
    if not st.standby:
        return None
    state = ["replay paused"] if st.paused else []
    if not st.receiving:
        state.append("not streaming from a primary")
    state.append(
        "caught up with the WAL it received" if st.lag_s == 0 else f"{seconds(st.lag_s)} behind"
    )
    line = f"jobctl: reading standby {st.where} ({', '.join(state)}): "
    if st.lag_s == 0:
        return line + "its rows are its primary's as of the last WAL it received"
    line += f"leases that expire within {seconds(st.lag_s)} of now may have been extended on the "
    line += "primary"
    if st.lag_s is None:
        return line + "; nothing was replayed since it started, so leases here are a guess"
    if widened:
        line += "; judged as expiring, not expired (--trust-replica: as this standby has them)"
    return line


def held_back(count: int, st: Standing | None) -> str | None:
    """The line saying how many expired leases ``stuck`` left out because of the lag."""
    if not count or st is None:
        return None
    return (
        f"jobctl: {count} lease(s) expired less than {seconds(st.lag_s)} ago on standby "
        f"{st.where} are not listed (see them with --expiring-within, or --trust-replica)"
    )


def widen(which: ExpiredFilter, st: Standing | None, *, trust: bool) -> ExpiredFilter:
    """The operator's filter with the standby's lag added to its grace: only leases that
    expired longer ago than the lag count as expired (unless ``trust``)."""
    if trust or st is None or not st.standby or not st.lag_s:
        return which
    return dataclasses.replace(which, grace=which.grace + st.margin)


def held_back_count(s: Session, asked: ExpiredFilter, st: Standing | None) -> int:
    """How many leases the operator's filter calls expired that the standby's lag keeps from
    being called so (they expired within the lag); the caller holds the transaction."""
    if st is None or not st.standby or not st.lag_s:
        return 0
    row = s.one("lag_held_back", {**asked.params(), "lag": st.margin})
    return int(row["held_back"])


def refusal(st: Standing, command: str) -> str:
    """Why a write is refused on a standby, and what to connect to instead: one line."""
    return (
        f"{st.where} is a standby (read only, in recovery): {command} writes, so it must run "
        f"on the primary; {PRIMARY_HINT}; nothing changed"
    )


def check(
    conn: psycopg.Connection[Any],
    command: str,
    *,
    writes: bool,
    widened: bool,
    say: Callable[[str], None],
) -> Standing:
    """Where ``command`` (its name, for the refusal) runs: if it ``writes``, a standby refuses
    it (exit 2) before anything is read or asked; a read on a standby says so (``say``), and
    whether its judgement of expiry is ``widened`` by the standby's lag."""
    st = probe(conn)
    if st.standby and writes:
        raise errors.Refused(refusal(st, command))
    line = notice(st, widened=widened)
    if line:
        say(line)
    return st


def dry_run_note(st: Standing | None) -> str | None:
    """reclaim --dry-run on a standby: where the commit has to run."""
    if st is None or not st.standby:
        return None
    return (
        f"jobctl: this dry run read standby {st.where}: the commit must run on the primary; "
        f"{PRIMARY_HINT}; a plan saved here applies there"
    )


def mark(doc: output.Document, st: Standing | None) -> output.Document:
    """On a standby, the JSON payload with a ``replica`` field (an object's key, or each row's);
    on a primary the document as it is, byte for byte. Tables and CSV keep their columns."""
    if st is None or not st.standby:
        return doc
    return replica_field.mark(doc, st.info())


def figures(st: Standing | None) -> dict[str, Any]:
    """The metrics' replica figures: the lag (0 on a primary; -1 when unknown) and the role."""
    if st is None or not st.standby:
        return {"replica_lag_s": 0.0, "standby": 0}
    return {"replica_lag_s": -1.0 if st.lag_s is None else st.lag_s, "standby": 1}
