"""Plan files (reclaim's --save-plan/--plan, and any other reviewed plan): written private and
whole, read back only when whole, unchanged by others, and made where they are applied.

A plan is a JSON object ``{"format": ..., "made_at": ..., "where": {...}, ...}``; ``where`` is
its origin (``db.where``: host, port, database, system identifier, table). Example::

    plans.write(path, {"format": FORMAT, "where": here, "rows": rows})
    document = plans.read(path, FORMAT, here)   # UsageError / Refused (exit 2) if not fit
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import stat
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from jobctl import errors, targets
from jobctl.contract import json_text

# what a plan's origin must name, and the place it is applied must match
ORIGIN = ("system_identifier", "database", "table")


def write(path: Path, document: dict[str, Any]) -> None:
    """``document`` as JSON at ``path``, mode 0600, atomically: a temporary file in the same
    directory (created exclusively, 0600), renamed over ``path``. Refused (exit 2) when
    ``path`` is a symbolic link, not a regular file, or a file another user owns: the plan is
    never written through a link nor into a file someone else can read or swap."""
    with _atomic(path) as put:
        put(json_text.to_json(document) + "\n")


@contextlib.contextmanager
def _atomic(path: Path) -> Iterator[Callable[[str], object]]:
    """A writer of text that lands at ``path`` as ``write`` says, once the block ends without
    an error; on an error the temporary file is removed and ``path`` left as it was."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise errors.UsageError(f"cannot write plan {path}: {exc.strerror}") from None
    if found is not None:
        if stat.S_ISLNK(found.st_mode):
            raise errors.UsageError(f"cannot write plan {path}: it is a symbolic link")
        if not stat.S_ISREG(found.st_mode):
            raise errors.UsageError(f"cannot write plan {path}: not a regular file")
        if found.st_uid != os.geteuid():
            raise errors.UsageError(
                f"cannot write plan {path}: the file belongs to another user (uid {found.st_uid})"
            )
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise errors.UsageError(f"cannot write plan {path}: {exc.strerror}") from None

    def failed(exc: OSError) -> errors.UsageError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return errors.UsageError(f"cannot write plan {path}: {exc.strerror}")

    def put(text: str) -> None:
        try:
            file.write(text)
        except OSError as exc:
            raise failed(exc) from None

    file = os.fdopen(fd, "w", encoding="utf-8")
    try:
        with file:
            yield put
            try:
                file.flush()
                os.fsync(file.fileno())
            except OSError as exc:
                raise failed(exc) from None
    except BaseException:  # the rows' source failed (or a write did): no plan, no temporary
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    try:
        os.replace(temporary, path)
    except OSError as exc:
        raise failed(exc) from None


def read(
    path: Path, format: str, location: dict[str, Any], kind: str = "jobctl plan", hint: str = ""
) -> dict[str, Any]:
    """The plan at ``path``, checked: of ``format`` (else not a ``kind``, and ``hint``), not
    writable by other users, with its origin, and made at ``location`` (the database and table
    it is about to be applied to). Each failure is one line: UsageError, or Refused for a plan
    made elsewhere (exit 2)."""
    document = read_document(path, format, kind, hint)
    check_origin(path, document.get("where"), location)
    return document


def read_document(path: Path, format: str, kind: str, hint: str) -> dict[str, Any]:
    """The JSON object at ``path``: nobody else could have written it (nor its directory:
    ``targets.check_trusted``), of ``format``; else one line."""
    try:
        with open(path, encoding="utf-8") as file:
            found = os.fstat(file.fileno())
            text = file.read()
    except OSError as exc:
        raise errors.UsageError(f"cannot read plan {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise errors.UsageError(f"{path} is not a jobctl plan (not JSON)") from None
    targets.check_trusted(path, found, "plan", "save it again")  # the config file's rule
    try:
        document = json.loads(text)
    except ValueError:
        raise errors.UsageError(f"{path} is not a jobctl plan (not JSON)") from None
    if not isinstance(document, dict) or document.get("format") != format:
        raise errors.UsageError(f"{path} is not a {kind} ({format}){hint}")
    return document


def check_origin(path: Path, made: Any, location: dict[str, Any]) -> None:
    """A plan's origin ``made`` (its ``where``) names a database and table, and it is
    ``location``'s: else one line, UsageError or Refused (exit 2)."""
    if not isinstance(made, dict) or not all(
        isinstance(made.get(key), str) and made[key] for key in ORIGIN
    ):
        raise errors.UsageError(
            f"plan {path} does not say where it was made (where: {', '.join(ORIGIN)}): refused"
        )
    for key in ORIGIN:
        if made[key] != location.get(key):
            raise errors.Refused(
                f"plan {path} was made for {key} {made[key]!r}, this is {location.get(key)!r}: "
                "nothing done"
            )


def write_rows(path: Path, format: str, location: dict[str, Any], rows: Sequence[Any]) -> None:
    """A plan of reviewed ``rows`` (each with what its write is fenced on), made at
    ``location``, written as ``write`` does."""
    with writing_rows(path, format, location) as write_some:
        write_some(rows)


@contextlib.contextmanager
def writing_rows(
    path: Path, format: str, location: dict[str, Any]
) -> Iterator[Callable[[Iterable[Any]], None]]:
    """``write_rows`` as the rows come (a dry run streamed from the server): a writer of some
    rows at a time, so that no list of them is held. The same bytes as ``write`` of the whole
    document (its JSON written in pieces); the plan lands at ``path`` only when the block ends
    without an error (else nothing is left, as ``write``)."""
    made_at = dt.datetime.now(dt.timezone.utc).isoformat()
    head = json_text.to_json({"format": format, "made_at": made_at, "where": location, "rows": []})
    if not head.endswith("[]}"):
        raise AssertionError("a plan's rows come last")
    with _atomic(path) as put:
        put(head[: -len("]}")])
        first = True

        def write_some(rows: Iterable[Any]) -> None:
            nonlocal first
            parts = []
            for row in rows:
                parts.append(json_text.to_json(row) if first else ", " + json_text.to_json(row))
                first = False
            put("".join(parts))

        yield write_some
        put("]}\n")


def read_rows(
    path: Path,
    format: str,
    location: dict[str, Any],
    required: Collection[str],
    kind: str = "jobctl plan",
    hint: str = "",
) -> list[dict[str, Any]]:
    """The rows of a plan written by ``write_rows``, checked as ``read`` does, each holding
    the ``required`` keys (else one line, exit 2)."""
    rows = read(path, format, location, kind, hint).get("rows")
    if not _rows_fit(rows, required):
        raise errors.UsageError(f"{path}: malformed plan rows")
    return rows


def _rows_fit(rows: Any, required: Collection[str]) -> TypeGuard[list[dict[str, Any]]]:
    return isinstance(rows, list) and all(
        isinstance(r, dict) and set(required) <= r.keys() for r in rows
    )


# ---------------------------------------------------------------- plans across targets
def write_parts(
    path: Path, format: str, parts: Sequence[tuple[dict[str, Any], Sequence[Any]]]
) -> None:
    """A plan across targets: one part (its ``where``, naming its ``target``, and its rows)
    per database, written as ``write`` does."""
    made_at = dt.datetime.now(dt.timezone.utc).isoformat()
    document = {
        "format": format,
        "made_at": made_at,
        "parts": [{"where": where, "rows": list(rows)} for where, rows in parts],
    }
    write(path, document)


# a plan across targets, by target: where its part was made, and its rows
Parts = dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]


def read_parts(path: Path, format: str, required: Collection[str]) -> Parts:
    """The parts of a plan across targets, by target: (where it was made, its rows). Each
    part is checked against its database by ``check_origin`` when it is applied."""
    document = read_document(
        path,
        format,
        "jobctl plan across targets",
        " (a plan saved with one target applies with that one --target)",
    )
    parts = document.get("parts")
    found: Parts = {}
    if not isinstance(parts, list):
        raise errors.UsageError(f"{path}: malformed plan parts")
    for part in parts:
        where = part.get("where") if isinstance(part, dict) else None
        target = where.get("target") if isinstance(where, dict) else None
        rows = part.get("rows") if isinstance(part, dict) else None
        if not isinstance(where, dict) or not isinstance(target, str):
            raise errors.UsageError(f"{path}: malformed plan parts")
        if not _rows_fit(rows, required):
            raise errors.UsageError(f"{path}: malformed plan parts")
        if target in found:
            raise errors.UsageError(f"{path}: two parts for target {target}: refused")
        found[target] = (where, rows)
    return found
