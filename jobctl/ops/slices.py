"""What the job is, as an operator narrows by it: its kind and queue (the
table's optional mapped columns, ``--column kind=COL``) and a text of its last error. The
parameters of the block ``mapped_filter`` (sql/queries.sql), which every filtered read and
reclaim's one decision share. Example::

    Slice(kinds=["send_email"], error="smtp").params()
    # {"kinds": ["send_email"], "queues": None, "error": "%smtp%"}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from jobctl.table.mapping import TableMapping


@dataclasses.dataclass(frozen=True)
class Slice:
    """What the job is, as the operator narrows by it: any of ``kinds``, any of
    ``queues`` (the table's mapped kind and queue columns), and a case-insensitive substring
    of the last error. The parameters of the block ``mapped_filter``."""

    kinds: Sequence[str] = ()
    queues: Sequence[str] = ()
    error: str | None = None

    def params(self) -> dict[str, Any]:
        return {
            "kinds": list(self.kinds) or None,
            "queues": list(self.queues) or None,
            "error": error_pattern(self.error),
        }

    def check(self, mapping: TableMapping) -> None:
        if self.kinds:
            mapping.require("kind", "--kind")
        if self.queues:
            mapping.require("queue", "--queue")

    def __bool__(self) -> bool:
        return bool(self.kinds or self.queues or self.error)


def error_pattern(text: str | None) -> str | None:
    """``--error TEXT`` as an ILIKE pattern matching TEXT anywhere, its own ``%``, ``_`` and
    backslashes escaped (LIKE's escape character), so that they match only themselves."""
    if text is None or text == "":
        return None
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


EVERY = Slice()  # no narrowing
