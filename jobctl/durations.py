"""Durations as operators type them: 30s, 5m, 1h, 1.5s, 250ms, 2d, plain seconds, and every
form jobctl prints (1m36s, 2h30m, 1h5m10s, 3d4h): what a screen shows can be typed back."""

from __future__ import annotations

import datetime as dt
import re

_NUMBER = r"\d+(?:\.\d+)?"
_PART = re.compile(rf"({_NUMBER})\s*(ms|s|m|h|d)")
_DURATION = re.compile(rf"^\s*(?:{_NUMBER}|(?:{_NUMBER}\s*(?:ms|s|m|h|d)\s*)+)$")
_ORDER = ("d", "h", "m", "s", "ms")  # a compound's units, largest first, each once
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
MAX = dt.timedelta(days=3650)


class InvalidDuration(ValueError):
    """Not a duration jobctl understands."""


def parse(text: str) -> dt.timedelta:
    """``text`` as a timedelta. Example: parse("1.5s") == timedelta(seconds=1.5),
    parse("1m36s") == timedelta(seconds=96), parse("1.5h") == timedelta(minutes=90)."""
    if not _DURATION.match(text):
        raise InvalidDuration(
            f"{text!r} is not a duration (use e.g. 30s, 5m, 1h30m, 1.5s or seconds)"
        )
    parts = _PART.findall(text)
    if not parts:
        seconds = float(text)
    else:
        units = [unit for _, unit in parts]
        ranks = [_ORDER.index(unit) for unit in units]
        if ranks != sorted(set(ranks)):
            raise InvalidDuration(
                f"{text!r} is not a duration: name its units largest first, each once (1h5m10s)"
            )
        seconds = sum(float(value) * _UNIT_SECONDS[unit] for value, unit in parts)
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
                return f"{int(seconds // size)}{unit}"
        return f"{seconds:.6f}".rstrip("0").rstrip(".") + "s"
    ms = round(duration.total_seconds() * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def human(value: float | dt.timedelta | None) -> str:
    """A duration as a terminal shows it, everywhere (tables, summary, report, explain):
    0.4s, 48s, 5m20s, 2h, 2h5m, 3d4h; negative with a leading minus; "" for None. Each
    form parses back (``parse``) to the duration it shows, to its last unit. Machine formats
    keep seconds (a number) and never come here."""
    if value is None:
        return ""
    total = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
    sign, total = ("-" if total < 0 else ""), abs(total)
    if total < 10:
        text = f"{total:.1f}s".replace(".0s", "s")
    elif total < 60:
        text = f"{total:.0f}s"
    else:
        whole = round(total)
        days, rest = divmod(whole, 86400)
        hours, rest = divmod(rest, 3600)
        minutes, secs = divmod(rest, 60)
        if days:
            text = f"{days}d{hours}h" if hours else f"{days}d"
        elif hours:
            text = f"{hours}h{minutes}m" if minutes else f"{hours}h"
        else:
            text = f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return sign + text
