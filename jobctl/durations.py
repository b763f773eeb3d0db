"""Durations as operators type them: 30s, 5m, 1h, 1.5s, 250ms, 2d or plain seconds."""

from __future__ import annotations

import datetime as dt
import re

_DURATION = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
MAX = dt.timedelta(days=3650)


class InvalidDuration(ValueError):
    """Not a duration jobctl understands."""


def parse(text: str) -> dt.timedelta:
    """``text`` as a timedelta. Example: parse("1.5s") == timedelta(seconds=1.5)."""
    match = _DURATION.match(text)
    if not match:
        raise InvalidDuration(f"{text!r} is not a duration (use e.g. 30s, 5m, 1h, 1.5s or seconds)")
    seconds = float(match["value"]) * _UNIT_SECONDS[match["unit"]]
    if seconds > MAX.total_seconds():
        raise InvalidDuration(f"{text!r} is longer than ten years")
    return dt.timedelta(seconds=seconds)


def show(duration: dt.timedelta, *, decimal_seconds: bool = False) -> str:
    """``duration`` as an operator types it, in the largest unit it is a whole number of.

    Two modes, each kept as its callers print it:

    - whole milliseconds (the default), units d, h, m, s, ms (the least values accepted:
      ``shorter than 100ms``): show(timedelta(milliseconds=100)) == "100ms",
      show(timedelta(days=1)) == "1d", show(timedelta(seconds=1.5)) == "1500ms";
    - ``decimal_seconds``: h or m when whole, else seconds with their decimals (a value the
      operator gave back, ``longer than 30m``): "0.1s", "24h", "1.5s" for the same three.
    """
    if decimal_seconds:
        seconds = duration.total_seconds()
        for unit, size in (("h", 3600), ("m", 60)):
            if seconds >= size and seconds % size == 0:
                return f"{seconds / size:g}{unit}"
        return f"{seconds:g}s"
    ms = round(duration.total_seconds() * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
