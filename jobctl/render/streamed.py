"""Rows shown on a terminal as they come (``output``'s streamed screen, laid out by the first
rows: ``screen.streamed``): 20,000 expired leases show their first screen at once. Beside
leases, many jobs with no lease are counted, not listed (``beside_leases``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from jobctl.render.output import Document, Section
from jobctl.render.views import AT_RISK_NOTE, AT_RISK_VIEW, STUCK_VIEW


def stuck(found: Iterator[Any], shown: list[str], *, at_risk: bool = False) -> Document:
    """``stuck``'s rows as they come (``views.stuck`` of a list, for a terminal): the
    view's columns follow the rows (a skipped one, the lease states); at risk, the note under
    the table once some row's lease is live."""
    section = Section(None, found, shown, AT_RISK_VIEW if at_risk else STUCK_VIEW)

    def noted() -> Iterator[Any]:
        for row in found:
            if at_risk and not section.note and row.get("lease_state") == "expiring":
                section.note = AT_RISK_NOTE
            yield row

    section.rows = noted()
    return Document(section.rows, [section])


# the most jobs with no lease a terminal lists below leases (expired, or expiring with
# --expiring-within); more are one line under the table, which names the command that lists
# them (jobctl stuck -o wide): 40 old lock-only rows would push 4 expired leases off the screen
NO_LEASE_LISTED = 10


@dataclasses.dataclass
class Collapsed:
    """How many jobs with no lease ``beside_leases`` left out (0: it listed every one)."""

    count: int = 0


def beside_leases(
    found: Iterator[Any], collapsed: Collapsed, listed: int = NO_LEASE_LISTED
) -> Iterator[Any]:
    """``stuck``'s rows as they come (the leases first, then the jobs with no lease: its
    ORDER BY), the jobs with no lease left out, counted in ``collapsed``, when more than
    ``listed`` of them follow a lease; all of them when no lease came first."""
    leases = 0
    held: list[Any] = []
    for row in found:
        if row.get("lease_state") != "none" or not leases:
            leases += row.get("lease_state") != "none"
            yield row
        elif collapsed.count:
            collapsed.count += 1
        else:
            held.append(row)
            if len(held) > listed:
                collapsed.count, held = len(held), []
    yield from held
