"""What ``metrics`` (and the reclaimer's notifications) share: where an exposition goes.

``--textfile PATH`` writes the exposition the way node_exporter's textfile collector wants a
file replaced: into a temporary file in the same directory (a name the collector skips, not
ending in ``.prom``), flushed to disk, then renamed over PATH in one step, so a scrape reads
the old file or the new one, never half of one; and it is written whatever the exit code
(up 0 when a database failed), so a failure is published instead of the last good figures.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from jobctl import errors

Textfile = Annotated[
    Path | None,
    typer.Option(
        "--textfile",
        metavar="PATH",
        dir_okay=False,
        help="Write the exposition to PATH through a temporary file and a rename (node_exporter's "
        "textfile collector), up 0 included, instead of stdout.",
    ),
]


def publish(textfile: Path | None, text: str) -> None:
    """``text`` to stdout, or replacing ``textfile`` in one rename."""
    if textfile is None:
        sys.stdout.write(text)
        return
    folder = textfile.parent
    try:
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{textfile.name}.", suffix=".tmp")
    except OSError as exc:
        raise errors.UsageError(f"--textfile {textfile}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)  # the collector runs as another user
        os.replace(temporary, textfile)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
