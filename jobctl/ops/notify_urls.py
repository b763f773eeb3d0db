"""Where the reclaimer's and ``stuck --watch``'s webhook URLs come from, and which are
refused: each checked (``check_url``: a usage error that never shows the URL, a webhook's
URL being its secret), named in the log by scheme and host only (``shown``), and warned
about when one on a command line looks like it holds a credential (``holds_secret``).
Pure: no network."""

from __future__ import annotations

import re
import urllib.parse

from jobctl import errors

# what a URL may hold as typed: RFC 3986's characters (an IRI is percent-encoded first)
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")


def check_url(url: str, source: str = "--notify") -> str:
    """An http(s) URL with a host and a valid port, or a usage error (exit 2) that names
    where it came from (``source``) and what is wrong, never a part of the URL: a webhook's
    URL is its secret, and a malformed one may hold it anywhere (``http://h:T0KEN/x``)."""
    why = _malformed(url)
    if why is not None:
        raise errors.UsageError(f"{source}: {why} (the URL is not shown: it may hold a secret)")
    return url


def _malformed(url: str) -> str | None:
    if not url or _URL_CHARS.fullmatch(url) is None:
        return "not a URL: spaces, control or non-ASCII characters (percent-encode them)"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises on a port that is not a number from 0 to 65535
    except ValueError:
        return "a malformed URL (its host or port cannot be read)"
    if parts.scheme not in ("http", "https"):
        return "not an http(s) URL"
    if not parts.hostname:
        return "an http(s) URL without a host"
    if port == 0:
        return "a malformed URL (port 0)"
    return None


def shown(url: str) -> str:
    """A URL as the log names it: scheme and host only (a webhook's path is its secret)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{':' + str(parts.port) if parts.port else ''}/…"


_TOKEN_SEGMENT = re.compile(r"(?=.*[A-Za-z])(?=.*[0-9])[^/]{8,}|[^/]{16,}")


def holds_secret(url: str) -> bool:
    """Whether ``url`` looks like it carries a credential: a user or password, a query or a
    fragment, or a path segment that looks like a token (16 characters or more, or 8 or more
    mixing letters and digits: Slack's ``/services/T0…/B0…/…``). A guess, on the side of
    saying: it only decides a warning."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password or parts.query or parts.fragment:
        return True
    segments = urllib.parse.unquote(parts.path).split("/")
    return any(_TOKEN_SEGMENT.fullmatch(segment) for segment in segments)


def urls_in(text: str, source: str) -> list[str]:
    """The URLs of a file or an environment variable: one per line (or separated by spaces),
    blank lines and ``#`` comments skipped; each checked (``check_url``), named by
    ``source`` and its line."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for word in line.split():
            found.append(check_url(word, f"{source} line {number}"))
    return found
