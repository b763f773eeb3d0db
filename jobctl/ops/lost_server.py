"""What a command had done when it lost its server: the line it ends with says how far it got
before the loss and whether running it again is safe (docs/replicas.md, failover)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jobctl import db, errors

RERUN_SAFE = "re-running the same command is safe"


class Progress:
    """What a command has done so far, for the line it ends with if it loses its server."""

    def __init__(self, unit: str, rerun: str = RERUN_SAFE, in_flight: str = "") -> None:
        self.unit, self.rerun, self.in_flight = unit, rerun, in_flight
        self.done = 0

    def lost(self, exc: errors.JobctlError) -> errors.JobctlError:
        """``exc`` (a lost server) with what was done before the loss and whether to re-run."""
        if not isinstance(exc, errors.ConnectError):
            return exc
        line = f"{exc.message}; before the loss: {self.done} {self.unit}"
        if self.in_flight:
            line += f"; {self.in_flight} in flight may or may not have committed"
        return errors.ConnectError(f"{line}; {self.rerun}")


def reclaimed(
    batches: Iterator[list[Any]], batch_size: int, dsn: str | None = None
) -> Iterator[list[Any]]:
    """A reclaim's batches, counted: losing the server ends it with one line saying how many
    jobs were reclaimed (committed) before the loss and that running it again is safe (the
    rows it reclaimed no longer qualify, the fence skips any that changed)."""
    progress = Progress(
        "job(s) reclaimed and committed",
        "re-running the same command is safe: it reclaims the rest, and none twice",
        f"the batch (up to {batch_size})",
    )
    try:
        with db.mapped_errors(dsn):
            for batch in batches:
                progress.done += sum(1 for row in batch if row.get("applied"))
                yield batch
    except errors.ConnectError as exc:
        raise progress.lost(exc) from None
