"""Rows shown on a terminal as they come (``output``'s streamed screen, laid out by the first
rows: ``screen.streamed``): 20,000 expired leases show their first screen at once."""

from __future__ import annotations

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
