"""Passwords kept out of every message: redacted from text, refused in a DSN's odd places."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from jobctl import errors

if TYPE_CHECKING:
    pass


_URI_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@", re.IGNORECASE)
_KV_PASSWORD = re.compile(r"(?P<head>password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)


def redact(text: str, dsn: str | None = None) -> str:
    """``text`` with every password (URI, key=value, or the DSN's own) replaced by ***."""
    if dsn:
        secret = _password_of(dsn)
        if secret:
            text = text.replace(secret, "***")
    text = _URI_PASSWORD.sub(r"\g<head>***@", text)
    return _KV_PASSWORD.sub(r"\g<head>***", text)


def _password_of(dsn: str) -> str | None:
    match = _URI_PASSWORD.search(dsn)
    if match:
        return match.group(0)[len(match["head"]) : -1] or None
    try:
        from psycopg import conninfo

        password = conninfo.conninfo_to_dict(dsn).get("password")
        return str(password) if password else None
    except Exception:
        match = _KV_PASSWORD.search(dsn)
        return match.group(0)[len(match["head"]) :].strip("'") if match else None


_URI_AUTHORITY = re.compile(r"^\s*[a-z][a-z0-9+.-]*://(?P<authority>[^/?#\s]*)", re.IGNORECASE)


def holds_password(dsn: str | None) -> bool:
    """Does this connection string carry a password (URI or key=value)?"""
    return bool(dsn) and bool(re.search(r"password|://[^/@\s]*:[^@\s]*@", dsn or "", re.IGNORECASE))


def check_dsn(dsn: str) -> None:
    """Refuse (exit 2) a URI whose authority has more than one '@': libpq would take the
    first for the end of the password and the rest for the host name, and say that host name
    in its error, the end of the password with it."""
    match = _URI_AUTHORITY.match(dsn)
    if match and match["authority"].count("@") > 1:
        raise errors.UsageError(
            "invalid connection string: more than one '@' before the host name "
            "(percent-encode an '@' in a user name or password as %40)"
        )
