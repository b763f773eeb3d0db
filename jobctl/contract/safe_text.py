"""Text that workers and applications wrote, made safe to show on a terminal.

A worker's name, an error, a status, a payload, a column's name: any of them may hold escape
sequences (``ESC ]0;title BEL`` retitles the window, ``ESC [2J`` clears it), newlines (a
forged line of ``explain``) or bidi controls (U+202E shows ``web-1\u202e1-bew`` reversed).
On a terminal jobctl shows each such character as a visible escape, so what is printed is
what is stored, one line per row:

* C0 and C1 control characters and DEL: ``\\n``, ``\\r``, ``\\t``, else ``\\xNN``;
* every format character (Unicode's category Cf: the bidi controls U+061C, U+200E, U+200F,
  U+202A-U+202E, U+2066-U+2069; the zero-width U+200B-U+200D, U+2060, U+FEFF; the soft
  hyphen U+00AD; the invisible operators U+2061-U+2064; the deprecated U+206A-U+206F; the
  interlinear annotations U+FFF9-U+FFFB; the tags U+E0001, U+E0020-U+E007F; the Arabic,
  Syriac, Brahmi, Egyptian, shorthand and musical format marks), the other invisible
  characters a name can hide behind (U+034F combining grapheme joiner, the Hangul fillers
  U+115F, U+1160, U+3164, U+FFA0, the Mongolian vowel separator U+180E, the whole tag block
  U+E0000-U+E007F) and the line and paragraph separators (U+2028, U+2029): ``\\uNNNN``
  (``\\UNNNNNNNN`` past U+FFFF).

A backslash is left as it is: ``web\\n7`` typed literally looks like an escaped newline, but
stays on its line. Machine formats piped to a file or program keep the data exact (see
docs/safety.md, "Text from rows on a terminal"). Pure: the rendering boundary (render's
output, the explain and message lines) calls it, and so do the messages of every layer that
quote a name read from the database (``db/``'s, ``schema/``'s).
"""

from __future__ import annotations

import re

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Unicode's format characters (category Cf, as of Unicode 15.1; tests/unit/test_safe_text.py
# checks the running Python's table against it), then the invisible letters and marks that
# are not Cf but show nothing (a worker named "web\u3164" looks like "web"), then the line
# and paragraph separators: a hard-coded class, since scanning the Unicode table at import
# would cost every command's start-up
_INVISIBLE = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\u034f\u115f\u1160\u3164\uffa0\U000e0000-\U000e007f"
    "\u2028\u2029"
)
# control characters, then the invisible or reordering ones (see the module's docstring)
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
# what a JSON encoder leaves raw (it escapes C0, quotes and backslashes itself)
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f{_INVISIBLE}]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


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
    return _UNSAFE_IN_JSON.sub(_json_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    """One character as JSON's ``\\uNNNN``; past U+FFFF as its UTF-16 surrogate pair, the only
    spelling JSON has for it (``\\ue0001`` would read as U+E000 and a "1")."""
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
