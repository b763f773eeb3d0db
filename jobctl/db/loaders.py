"""How jobctl reads values from PostgreSQL where psycopg's own loaders would fail on what an
application stores: json nested too deep for Python's json, times beyond Python's calendar,
and dates and times in a pipeline read after the session's own DateStyle came back."""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg


# json/jsonb nested deeper than this is kept as its JSON text (a JsonText, a string): Python's
# json recurses (RecursionError past ~1,000 levels) and jq 1.6 stops at 256
JSON_DEPTH = 200
_JSON_STRING, _JSON_BRACKET = re.compile(rb'"(?:[^"\\]|\\.)*"'), re.compile(rb"[\[\]{}]")


class JsonText(str):
    """A json/jsonb value nested deeper than JSON_DEPTH: the JSON text PostgreSQL sent."""


def json_depth_exceeds(data: bytes, limit: int = JSON_DEPTH) -> bool:
    """Is the JSON text ``data`` nested deeper than ``limit``? (A loop, never recursion.)"""
    if data.count(b"[") + data.count(b"{") <= limit:  # the common case, at C speed
        return False
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub(b"", data)):
        depth += 1 if bracket.group() in (b"[", b"{") else -1
        if depth > limit:
            return True
    return False


def load_json(data: bytes | bytearray | memoryview | str) -> Any:
    """psycopg's json/jsonb loader: json.loads, or JsonText when nested past JSON_DEPTH."""
    if isinstance(data, str):
        data = data.encode()
    raw = data if isinstance(data, bytes) else bytes(data)
    return JsonText(raw.decode()) if json_depth_exceeds(raw) else json.loads(raw)


def times_beyond_the_calendar_as_text(cursor: psycopg.Cursor[Any]) -> None:
    """On ``cursor`` only: a timestamp Python's datetime cannot hold (``infinity``,
    ``-infinity``, a year past 9999 or before 1) loads as the server's text for it instead
    of failing the statement, so that one such value in a row is shown, not an error. (Only
    where a whole row is read as it is, e.g. ``show``: the lease statements never send one,
    see ``lease_times_poisoned`` in sql/queries.sql.)"""
    import psycopg
    from psycopg.types import datetime as times

    for name, stock in (
        ("timestamptz", times.TimestamptzLoader),
        ("timestamp", times.TimestampLoader),
    ):

        class Lenient(stock):  # type: ignore[misc,valid-type]
            def load(self, data: Any) -> Any:
                try:
                    return super().load(data)
                except psycopg.DataError:
                    return bytes(data).decode("ascii", "replace")

        cursor.adapters.register_loader(name, Lenient)


# the date/time types whose text psycopg reads by the connection's reported DateStyle
_DATE_TIME_TYPES = ("timestamptz", "timestamp", "date")


def reading_iso(cursor: psycopg.Cursor[Any]) -> psycopg.Cursor[Any]:
    """``cursor``, reading dates and times as ISO whatever the connection reports. In a
    pipeline, psycopg reads the statement's rows after the COMMIT, by which time the server
    has reported the session's own DateStyle back (German, say), while the rows were written
    under the transaction's ISO (``parse_settings``): psycopg's loader made without a
    connection reads ISO (in UTC: the connection's time zone is put back)."""
    import psycopg

    loader = _iso_loader(cursor.connection.info.timezone)
    for name in _DATE_TIME_TYPES:
        cursor.adapters.register_loader(psycopg.adapters.types[name].oid, loader)
    return cursor


@functools.cache
def _iso_loader(zone: dt.tzinfo) -> type[Any]:
    """The loader of ``reading_iso`` for a connection in time zone ``zone`` (made once)."""
    import psycopg
    from psycopg import abc, adapt, pq

    class IsoLoader(adapt.Loader):
        def __init__(self, oid: int, context: abc.AdaptContext | None = None) -> None:
            super().__init__(oid, context)
            stock = psycopg.adapters.get_loader(oid, pq.Format.TEXT)
            assert stock is not None
            self.stock = stock(oid)  # no connection: ISO

        def load(self, data: Any) -> Any:
            value = self.stock.load(data)
            if getattr(value, "tzinfo", None) is None:  # a date, a timestamp without zone
                return value
            try:
                return value.astimezone(zone)
            except OverflowError:  # next to year 10000: kept in UTC, as psycopg does
                return value

    return IsoLoader
