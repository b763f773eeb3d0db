"""How a command reaches a database: its session, opened the same way whether the command
runs on one database or on several — the server it found (a write refused on a standby before
anything is read or asked; a read on a standby said so), and a table jobctl does not serve (yet)
said to be so, with the next step (``unserved.explained``). Example::

    with sessions.open(settings, Access("requeue", writes=True), say=print) as (s, standing):
        ...
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from jobctl import db
    from jobctl.db.session import Session
    from jobctl.ops.standby import Standing


class Kept(Protocol):
    """Sessions kept from one read to the next (``fleet.KeptSessions``, a watch's)."""

    def session(
        self, settings: db.Settings, on_connect: Callable[[Any], None] | None = None
    ) -> contextlib.AbstractContextManager[Session]: ...


@dataclasses.dataclass(frozen=True)
class Access:
    """What a command does to the database: its name (for a refusal's line), whether it
    ``writes`` (so must run on the primary), and whether its judgement of expiry is
    ``widened`` by a standby's lag (``stuck``, ``reclaim``, unless --trust-replica)."""

    command: str
    writes: bool = False
    widened: bool = False


@contextlib.contextmanager
def open(
    settings: db.Settings,
    access: Access,
    *,
    say: Callable[[str], None],
    on_connect: Callable[[Any], None] | None = None,
    kept: Kept | None = None,
) -> Iterator[tuple[Session, Standing]]:
    """The session for ``access`` on ``settings``' database (a new one, or the one ``kept``
    holds for this target across a watch's refreshes) and the server it is on. Database
    errors inside become one line (``db.mapped_errors``); ``on_connect`` gets the connection
    as soon as it is made (``fleet.Busy``: Ctrl-C can then cancel even the table's lookup)."""
    from jobctl.db import session
    from jobctl.ops import standby
    from jobctl.schema import unserved, versions

    opened = kept.session(settings, on_connect) if kept else session.open(settings, on_connect)
    with opened as s, unserved.explained(s):
        standing = standby.check(
            s.conn, access.command, writes=access.writes, widened=access.widened, say=say
        )
        if access.writes:  # refused before anything is asked, when no role may run it
            s.write_role()
            with s.transaction(read_only=True):  # a newer jobctl's install: said, goes on
                versions.warn_newer(s.conn, s.table.oid, say)
        yield s, standing
