"""JSON as jobctl writes it: strict (RFC 8259), its values' types encoded as the contract says
(ISO timestamps with their offset, seconds, UUIDs as strings), by json's C encoder made once.
Pure: ``render/output`` renders with it, the plan files are written with it, and a
statement's JSON parameter is its text (``db.json_parameter``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import json.encoder
import math
import uuid
from collections.abc import Callable, Iterable
from typing import Any


def _json_default(value: Any) -> str | float:
    exact = _EXACT.get(type(value))  # the common cases first: a row's timestamps and tokens
    if exact is not None:
        return exact(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        number = float(value)  # NaN, +-Infinity, and beyond a float's range: as text
        return number if math.isfinite(number) else _non_finite(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _non_finite(number: float | decimal.Decimal) -> str:
    """A number JSON has no word for, as PostgreSQL spells it: NaN, Infinity, -Infinity (a
    numeric beyond a float's range: its digits)."""
    if number != number:  # NaN is the one value unequal to itself
        return "NaN"
    if number in (math.inf, -math.inf):
        return "Infinity" if number > 0 else "-Infinity"
    return str(number)


def _finite(value: Any) -> object:
    """``value`` with every non-finite float (a float8 column, or inside a float8[]) as
    _non_finite's string: JSON is strict (allow_nan=False), and this runs only when the
    strict encoder refused."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _non_finite(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


_EXACT: dict[type, Callable[[Any], str]] = {dt.datetime: dt.datetime.isoformat, uuid.UUID: str}
_ENCODER = json.JSONEncoder(default=_json_default, ensure_ascii=False, allow_nan=False)
# json.dumps's own C encoder, made once instead of once per row (as JSONEncoder.encode does,
# the second reason a row cost 12 us): the same text, byte for byte (tests/unit/test_output.py)
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # None without the C module
_C_ENCODER = (
    _MAKE_ENCODER(
        None, _json_default, json.encoder.encode_basestring, None, ": ", ", ", False, False, False
    )
    if _MAKE_ENCODER is not None
    else None
)


def to_json(value: Any, *, indent: int | None = None) -> str:
    """Strict JSON (RFC 8259): never a bare NaN or Infinity (see _non_finite)."""
    try:
        if indent is None:  # one encoder for every row: json.dumps builds one per call
            if _C_ENCODER is not None:
                return "".join(_C_ENCODER(value, 0))
            return _ENCODER.encode(value)
        return json.dumps(
            value, default=_json_default, indent=indent, ensure_ascii=False, allow_nan=False
        )
    except ValueError:  # a non-finite float
        return to_json(_finite(value), indent=indent)


def json_lines(items: Iterable[Any]) -> str:
    """Items as JSON lines, in one string (a batch of rows written in one call)."""
    if _C_ENCODER is None:
        return "".join([f"{to_json(item)}\n" for item in items])
    encode = _C_ENCODER
    lines = []
    for item in items:
        try:
            lines.append("".join(encode(item, 0)) + "\n")
        except ValueError:  # a non-finite float: strict JSON (to_json)
            lines.append(to_json(item) + "\n")
    return "".join(lines)
