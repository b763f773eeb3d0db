"""Text that workers and applications wrote, made safe to show on a terminal.

A worker's name, an error, a status, a payload, a column's name: any of them may hold escape
sequences (``ESC ]0;title BEL`` retitles the window, ``ESC [2J`` clears it), newlines (a
forged line of ``explain``), bidi controls (U+202E shows ``web-1\u202e1-bew`` reversed) or
characters that show nothing (``w1\ufe0f`` reads as ``w1``). On a terminal jobctl shows each
such character as a visible escape, so what is printed is what is stored, one line per row:

* C0 and C1 control characters and DEL: ``\\n``, ``\\r``, ``\\t``, else ``\\xNN``;
* by property, not by a list of look-alikes: every format character (Unicode's category Cf:
  bidi controls, zero-width joiners, the Arabic, Syriac, Brahmi and Egyptian format marks);
  every Default_Ignorable_Code_Point (``DEFAULT_IGNORABLE``: the soft hyphen, the combining
  grapheme joiner, the Hangul fillers, the Khmer inherent vowels, the Mongolian free
  variation selectors and vowel separator, the variation selectors U+FE00-U+FE0F and
  U+E0100-U+E01EF, the tags, and the code points Unicode reserves as ignorable); the blank
  characters that are not whitespace (``BLANK``: the Braille pattern blank U+2800, the Hangul
  and Khitan fillers, the musical null notehead); the line and paragraph separators U+2028,
  U+2029: ``\\uNNNN`` (``\\UNNNNNNNN`` past U+FFFF).

Ordinary text is left alone: letters of any script, accented or combined, CJK, emoji (an
emoji's variation selector or zero-width joiner is shown, ``\u2764\ufe0f`` as
``\u2764\\ufe0f``). A backslash is left as it is: ``web\\n7`` typed literally looks like an
escaped newline, but stays on its line. Machine formats piped to a file or program keep the
data exact (see docs/safety.md, "Text from rows on a terminal"). Pure: the rendering boundary
(render's output, the explain and message lines) calls it, and so do the messages of every
layer that quote a name read from the database (``db/``'s, ``schema/``'s).
"""

from __future__ import annotations

import re
from typing import Final

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

# Default_Ignorable_Code_Point, as DerivedCoreProperties.txt lists it (the same ranges in
# Unicode 14.0, 15.0, 15.1 and 16.0: 4,174 code points; tests/unit/test_safe_text.py compares
# them with the Unicode database on the machine when it finds one). Python's unicodedata has
# no such property: what a renderer may show as nothing at all, assigned or not
DEFAULT_IGNORABLE: Final[tuple[tuple[int, int], ...]] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors 1-3, vowel separator, FVS 4
    (0x200B, 0x200F),  # zero-width space, non-joiner and joiner; LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated format
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors 1-16 (the emoji one, U+FE0F)
    (0xFEFF, 0xFEFF),  # zero-width no-break space (byte order mark)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # reserved, default ignorable
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls (beams, ties, slurs, phrases)
    (0xE0000, 0xE0FFF),  # tags, variation selectors 17-256, reserved
)
# The blanks that are not whitespace: drawn as an empty cell or as nothing, so a worker named
# "web\u2800" looks like "web " (the Hangul fillers are default ignorable as well)
BLANK: Final[tuple[tuple[int, int], ...]] = (
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x2800, 0x2800),  # Braille pattern blank: a cell of no dots
    (0x3164, 0x3164),  # Hangul filler
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0x16FE4, 0x16FE4),  # Khitan small script filler: an empty slot of a block
    (0x1D159, 0x1D159),  # musical symbol null notehead: a notehead of no size
)
# Unicode's format characters (category Cf, as of Unicode 15.1) that are not default
# ignorable (tests/unit/test_safe_text.py checks every Cf of the running Python's table),
# then the line and paragraph separators
_FORMAT_AND_SEPARATORS: Final[tuple[tuple[int, int], ...]] = (
    (0x0600, 0x0605),  # Arabic number signs
    (0x06DD, 0x06DD),  # Arabic end of ayah
    (0x070F, 0x070F),  # Syriac abbreviation mark
    (0x0890, 0x0891),  # Arabic pound and piastre marks above
    (0x08E2, 0x08E2),  # Arabic disputed end of ayah
    (0x2028, 0x2029),  # line and paragraph separators
    (0xFFF9, 0xFFFB),  # interlinear annotations
    (0x110BD, 0x110BD),  # Kaithi number sign
    (0x110CD, 0x110CD),  # Kaithi number sign above
    (0x13430, 0x1343F),  # Egyptian hieroglyph format controls
)


def _ranges(*tables: tuple[tuple[int, int], ...]) -> str:
    """The tables' code points as the body of a regular expression's character class (a few
    dozen ranges: nothing scanned at import, which every command's start-up would pay)."""
    return "".join(
        chr(first) if first == last else f"{chr(first)}-{chr(last)}"
        for table in tables
        for first, last in table
    )


_INVISIBLE = _ranges(DEFAULT_IGNORABLE, BLANK, _FORMAT_AND_SEPARATORS)
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
