"""Text that workers and applications wrote, made safe to show on a terminal.

A worker's name, an error, a status, a payload, a column's name: any of them may hold escape
sequences (``ESC ]0;title BEL`` retitles the window, ``ESC [2J`` clears it), newlines (a
forged line of ``explain``) or bidi controls (U+202E shows ``web-1\u202e1-bew`` reversed).
On a terminal jobctl shows each such character as a visible escape, so what is printed is
what is stored, one line per row:

* C0 and C1 control characters and DEL: ``\\n``, ``\\r``, ``\\t``, else ``\\xNN``;
* bidi controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), zero-width and
  invisible format characters (U+200B-U+200D, U+2060, U+FEFF) and the line and paragraph
  separators (U+2028, U+2029): ``\\uNNNN``.

A backslash is left as it is: ``web\\n7`` typed literally looks like an escaped newline, but
stays on its line. Machine formats piped to a file or program keep the data exact (see
docs/safety.md, "Text from rows on a terminal"). Pure: the rendering boundary (output.py,
the explain and message lines) calls it.
"""

from __future__ import annotations

import re

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# control characters, then the invisible or reordering ones (see the module's docstring)
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f]|[\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff]"
)
# what a JSON encoder leaves raw (it escapes C0, quotes and backslashes itself)
_UNSAFE_IN_JSON = re.compile(
    "[\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff]"
)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control, bidi and invisible character shown as an escape: one line,
    in the order it is stored, with nothing a terminal would obey."""
    if _UNSAFE.search(text) is None:  # the common case: nothing to do, no copy
        return text
    return _UNSAFE.sub(_escape, text)


def json_text(text: str) -> str:
    """JSON text for a terminal: the characters a JSON encoder leaves raw (C1 controls, DEL,
    bidi and invisible ones) as ``\\uNNNN`` escapes. Still valid JSON and the same data (such
    characters occur only inside strings), so ``jq`` reads it unchanged."""
    if _UNSAFE_IN_JSON.search(text) is None:
        return text
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
