"""SQL text safe to print: a generated script (``--sql``) holds no control character.

psycopg quotes an identifier or a literal exactly, control characters and all: valid SQL, but
a partition named ``"jobs_b<ESC>[2J"`` would clear the terminal the script is printed on, and a
newline in a literal splits a line of the reviewed script. ``printable`` writes such a name as a
Unicode-escaped identifier (``U&"jobs_b\\001B[2J"``) and such a text as an escape string
(``E'run\\nDROP ...'``): the same name and value for PostgreSQL, one visible line for a person.
Everything else is left to psycopg's quoting. Pure: no database (layer 0).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psycopg import sql

# C0 and C1 controls, DEL, bidi and invisible format characters, line/paragraph separators
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069\ufeff]"
)


def identifier(name: str) -> str:
    """``name`` as a Unicode-escaped quoted identifier: U&"..." with \\XXXX for unsafe ones."""
    body = UNSAFE.sub(
        lambda m: f"\\{ord(m.group()):04X}", name.replace("\\", "\\\\").replace('"', '""')
    )
    return f'U&"{body}"'


def literal(text: str) -> str:
    """``text`` as an escape string constant: E'...' with \\uXXXX for unsafe characters."""
    body = UNSAFE.sub(
        lambda m: f"\\u{ord(m.group()):04X}", text.replace("\\", "\\\\").replace("'", "\\'")
    )
    return f"E'{body}'"


def printable(statement: sql.Composable) -> sql.Composable:
    """``statement`` with each identifier and text literal that holds an unsafe character in
    its escaped form (see the module); the others, and all else, as they are. (psycopg keeps a
    composable's parts in ``_obj``: no public accessor in this version.)"""
    from psycopg import sql

    parts = getattr(statement, "_obj", None)
    if isinstance(statement, sql.Composed) and isinstance(parts, list):
        return sql.Composed([printable(part) for part in parts])
    if isinstance(statement, sql.Identifier) and isinstance(parts, tuple):
        if any(UNSAFE.search(s) for s in parts):
            names = (identifier(s) if UNSAFE.search(s) else _quoted(s) for s in parts)
            return sql.SQL(".".join(names))
    if isinstance(statement, sql.Literal) and isinstance(parts, str) and UNSAFE.search(parts):
        return sql.SQL(literal(parts))
    return statement


def _quoted(name: str) -> str:
    """A name without unsafe characters, quoted as psycopg (libpq) quotes it."""
    return '"' + name.replace('"', '""') + '"'
