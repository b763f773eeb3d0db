"""The table's own names: which of its columns and status values play the lease design's parts.

The lease design is a retrofit onto an existing jobs table, whose columns and statuses already
have names (``state``, ``pending/running/completed``, ``locked_by``, ``scheduled_at`` ...). A
``TableMapping`` says, for each of the design's names, what the table calls it; jobctl keeps the
design's names in its output (the JSON contract) and speaks the table's in SQL. Operators give
it as ``--column DESIGN=ACTUAL`` and ``--status DESIGN=ACTUAL`` (and ``--park-status VALUE``);
``schema apply`` records it in the database, so everyone on call reads the same one.
Example::

    m = mapping.TableMapping.parse(columns=["status=state"], statuses=["queued=pending"])
    m.column("status") == "state"; m.status("queued") == "pending"
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from jobctl import errors

# the columns the lease design reads or writes: the table's own (it keeps them), then its five
EXISTING_COLUMNS = (
    "id",
    "status",
    "attempts",
    "max_attempts",
    "available_at",
    "reserved_by",
    "reserved_at",
    "last_error",
    "finished_at",
    "updated_at",
)
LEASE_COLUMNS = (
    "attempt_token",
    "lease_expires_at",
    "heartbeat_at",
    "recovery_policy",
    "reclaim_count",
)
COLUMNS = EXISTING_COLUMNS + LEASE_COLUMNS
# what the job is, where the table says so: optional, shown and filtered on when
# mapped (--column kind=COL --column queue=COL), never written
OPTIONAL_COLUMNS = ("kind", "queue")
# the job's priority, where the table keeps one (--column priority=COL): the claim takes a
# lower value first (Delayed::Job, Oban, River), or a higher one with --priority-order desc;
# shown by stuck and show, never written
PRIORITY = "priority"
PRIORITY_ORDERS = ("asc", "desc")
STATUSES = ("queued", "processing", "done", "failed")
# a final status of the table's own that jobctl cancel writes where it is mapped (--status
# cancelled=VALUE, OCA queue_job's cancelled); unmapped, cancel writes failed, as it always did
CANCELLED = "cancelled"
UNITS = ("s", "ms")  # of a time kept as a number: seconds or milliseconds since the epoch
# the zone a time column of type timestamp (without time zone) is kept in, unless --time-zone
# names another: what Django without USE_TZ, Rails and most ORMs write
DEFAULT_TIME_ZONE = "UTC"


@dataclasses.dataclass(frozen=True)
class TableMapping:
    """The design's names -> the table's (only where they differ), and the park status."""

    columns: Mapping[str, str] = dataclasses.field(default_factory=dict)
    statuses: Mapping[str, str] = dataclasses.field(default_factory=dict)
    park_status: str | None = None  # where reclaim sends what it would fail; None: failed
    # the unit of a time column kept as a number (--column-unit updated_at=ms): design -> unit
    units: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # which priority the claim takes first (--priority-order): asc, the lowest; desc, the highest
    priority_order: str = "asc"
    # the max_attempts value that means no limit (--unlimited-max-attempts: OCA queue_job's
    # max_retries = 0, retry for ever); None: every value is a limit
    unlimited_max_attempts: int | None = None
    # the zone the table's times of type timestamp (without time zone) are kept in
    # (--time-zone); None: DEFAULT_TIME_ZONE. Every statement reads and writes them in it,
    # whatever the session's TimeZone (column_types.zoned)
    time_zone: str | None = None

    @property
    def zone(self) -> str:
        """The zone the table's times without a zone are in (``time_zone``, else UTC)."""
        return self.time_zone or DEFAULT_TIME_ZONE

    def column(self, design: str) -> str:
        """What the table calls the design's column ``design``."""
        if design not in COLUMNS:
            raise KeyError(design)
        return self.columns.get(design, design)

    def status(self, design: str) -> str:
        """What the table calls the design's status ``design``."""
        if design not in STATUSES:
            raise KeyError(design)
        return self.statuses.get(design, design)

    @property
    def cancelled(self) -> str | None:
        """The table's own cancelled status (--status cancelled=VALUE), or None."""
        return self.statuses.get(CANCELLED)

    @property
    def cancels_to(self) -> str:
        """The status jobctl cancel gives a job: the mapped cancelled one, else failed."""
        return self.cancelled or self.status("failed")

    def optional(self, design: str) -> str | None:
        """The table's column playing the optional ``design`` (kind, queue), or None."""
        if design not in OPTIONAL_COLUMNS:
            raise KeyError(design)
        return self.columns.get(design)

    @property
    def priority(self) -> str | None:
        """The table's column holding the job's priority (--column priority=COL), or None."""
        return self.columns.get(PRIORITY)

    @property
    def mapped_optional(self) -> tuple[str, ...]:
        """The optional columns this table maps (kind, queue), in that order."""
        return tuple(d for d in OPTIONAL_COLUMNS if d in self.columns)

    def require(self, design: str, option: str) -> None:
        """UsageError (exit 2) when ``option`` needs the optional column ``design`` unmapped."""
        if self.optional(design) is None:
            raise errors.UsageError(
                f"{option} needs the table's {design} column: map it with jobctl schema apply "
                f"--column {design}=COLUMN (with the rest of the mapping)"
            )

    @property
    def parked(self) -> str:
        """The status reclaim gives a job it will not retry."""
        return self.park_status or self.status("failed")

    @property
    def named_park(self) -> str | None:
        """Where reclaim sends what it will not retry, when that is not plain ``failed`` (the
        park status, or the table's own name for failed): what its commit line and the
        report both name ("parked in errored"); None for ``failed``."""
        return None if self.parked == "failed" else self.parked

    def role(self, value: str | None) -> str | None:
        """The part a status value of the table plays: one of STATUSES, ``parked``, or None
        (a status of the application's own that jobctl does not touch)."""
        for design in STATUSES:
            if self.status(design) == value:
                return design
        if value is not None and value == self.cancelled:
            return CANCELLED
        return "parked" if value is not None and value == self.park_status else None

    def written_statuses(self) -> list[str]:
        """Every status value jobctl may write: the column must accept each of them."""
        values = [self.status(s) for s in STATUSES]
        values += [v for v in (self.cancelled, self.park_status) if v is not None]
        return list(dict.fromkeys(values))

    @classmethod
    def parse(
        cls,
        *,
        columns: Iterable[str] = (),
        statuses: Iterable[str] = (),
        park_status: str | None = None,
        units: Iterable[str] = (),
        priority_order: str | None = None,
        unlimited_max_attempts: str | None = None,
        time_zone: str | None = None,
    ) -> TableMapping:
        """From ``DESIGN=ACTUAL`` pairs as typed; UsageError (exit 2) on anything ambiguous."""
        given = list(columns)
        optional = [c for c in given if c.partition("=")[0].strip() in OPTIONAL_COLUMNS]
        ordered = [c for c in given if c.partition("=")[0].strip() == PRIORITY]
        column_map = _pairs(
            [c for c in given if c not in optional and c not in ordered], COLUMNS, "--column"
        )
        column_map |= _pairs(
            optional, OPTIONAL_COLUMNS, "--column", keep_same=True, shape="kind=COLUMN"
        )
        column_map |= _pairs(
            ordered, (PRIORITY,), "--column", keep_same=True, shape="priority=COLUMN"
        )
        if priority_order is not None and priority_order not in PRIORITY_ORDERS:
            raise errors.UsageError(
                f"--priority-order {priority_order}: asc (the lowest priority value is claimed "
                "first) or desc (the highest)"
            )
        given_statuses = list(statuses)
        cancelled = [v for v in given_statuses if v.partition("=")[0].strip() == CANCELLED]
        status_map = _pairs([v for v in given_statuses if v not in cancelled], STATUSES, "--status")
        status_map |= _pairs(
            cancelled, (CANCELLED,), "--status", keep_same=True, shape="cancelled=VALUE"
        )
        unit_map = _pairs(
            units, COLUMNS, "--column-unit", keep_same=True, shape="DESIGN=UNIT, e.g. updated_at=ms"
        )
        for design, unit in unit_map.items():
            if unit not in UNITS:
                raise errors.UsageError(
                    f"--column-unit {design}={unit}: the unit is s or ms (seconds or "
                    "milliseconds since the epoch)"
                )
        if time_zone is not None and not time_zone.strip():
            raise errors.UsageError("--time-zone must not be empty (UTC, Europe/Brussels ...)")
        mapping = cls(
            column_map,
            status_map,
            park_status or None,
            unit_map,
            priority_order or "asc",
            _unlimited(unlimited_max_attempts),
            time_zone.strip() if time_zone else None,
        )
        mapping.check()
        return mapping

    def onto(self, recorded: TableMapping, named: Given) -> TableMapping:
        """This mapping (given on the command line, naming ``named``'s parts) merged into the
        one ``recorded`` for the table: each part named replaces the recorded one (a column or
        status named as the design's own, ``--column attempts=attempts``, goes back to it);
        every part not named is kept. ``schema apply --column kind=class_name`` on a mapped
        table adds the kind to its names instead of forgetting them."""

        def merged(
            old: Mapping[str, str], new: Mapping[str, str], parts: frozenset[str]
        ) -> dict[str, str]:
            out = {d: a for d, a in old.items() if d not in parts}
            return out | {d: a for d, a in new.items() if d in parts}

        mapping = TableMapping(
            merged(recorded.columns, self.columns, named.columns),
            merged(recorded.statuses, self.statuses, named.statuses),
            self.park_status if named.park_status else recorded.park_status,
            merged(recorded.units, self.units, named.units),
            self.priority_order if named.priority_order else recorded.priority_order,
            (
                self.unlimited_max_attempts
                if named.unlimited_max_attempts
                else recorded.unlimited_max_attempts
            ),
            self.time_zone if named.time_zone else recorded.time_zone,
        )
        mapping.check()
        if mapping.priority_order != "asc" and mapping.priority is None:
            raise errors.UsageError(
                "--priority-order needs the table's priority column: map it with "
                "--column priority=COLUMN"
            )
        return mapping

    def check(self) -> None:
        """No two parts on one column or one status; a park status that is not another's."""
        _distinct(
            {d: self.column(d) for d in COLUMNS}
            | {d: self.columns[d] for d in self.mapped_optional}
            | ({PRIORITY: self.priority} if self.priority is not None else {}),
            "--column",
            "column",
        )
        _distinct(
            {d: self.status(d) for d in STATUSES}
            | ({CANCELLED: self.cancelled} if self.cancelled is not None else {}),
            "--status",
            "status value",
        )
        if self.park_status is not None:
            if not self.park_status.strip():
                raise errors.UsageError("--park-status must not be empty")
            taken = {self.status(s): s for s in ("queued", "processing", "done")}
            if self.cancelled is not None:
                taken[self.cancelled] = CANCELLED
            if self.park_status in taken:
                raise errors.UsageError(
                    f"--park-status {self.park_status!r} is the {taken[self.park_status]} "
                    "status: parked jobs need a status of their own (or failed)"
                )

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "columns": dict(sorted(self.columns.items())),
            "statuses": dict(sorted(self.statuses.items())),
            "park_status": self.park_status,
        }
        if self.units:  # (absent when none: the recorded mappings of earlier versions read)
            data["units"] = dict(sorted(self.units.items()))
        if self.priority_order != "asc":  # (absent when the lowest first, as units)
            data["priority_order"] = self.priority_order
        if self.unlimited_max_attempts is not None:  # (absent when every value is a limit)
            data["unlimited_max_attempts"] = self.unlimited_max_attempts
        if self.time_zone is not None:  # (absent when not named: UTC, as units)
            data["time_zone"] = self.time_zone
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> TableMapping:
        data = json.loads(text) if isinstance(text, str) else text
        mapping = cls(
            dict(data.get("columns") or {}),
            dict(data.get("statuses") or {}),
            data.get("park_status"),
            dict(data.get("units") or {}),
            data.get("priority_order") or "asc",
            data.get("unlimited_max_attempts"),
            data.get("time_zone"),
        )
        mapping.check()
        return mapping

    def describe(self) -> list[str]:
        """The mapping in lines an operator reads (``schema check``), design = table."""
        lines = [
            f"{d} = {a}"
            for d, a in sorted(self.columns.items())
            if a != d and d not in OPTIONAL_COLUMNS and d != PRIORITY
        ]
        lines += [f"{d} = {self.columns[d]}" for d in self.mapped_optional]
        if self.priority is not None:
            first = "highest" if self.priority_order == "desc" else "lowest"
            lines.append(f"priority = {self.priority} ({first} claimed first)")
        if self.unlimited_max_attempts is not None:
            lines.append(
                f"{self.column('max_attempts')} = {self.unlimited_max_attempts} means no limit "
                "on attempts"
            )
        lines += [
            f"status {d} = {a}"
            for d, a in sorted(self.statuses.items())
            if a != d and d != CANCELLED
        ]
        if self.cancelled is not None:
            lines.append(f"jobctl cancel gives jobs {self.cancelled}")
        if self.park_status:
            lines.append(f"parked jobs go to {self.park_status}")
        lines += [
            f"{d} in epoch {'milliseconds' if u == 'ms' else 'seconds'}"
            for d, u in sorted(self.units.items())
        ]
        if self.time_zone is not None:
            lines.append(f"times without a zone are in {self.time_zone}")
        return lines or ["the lease design's own names"]


@dataclasses.dataclass(frozen=True)
class Given:
    """Which parts of a mapping the command line named: ``--column`` designs, ``--status``
    designs, ``--column-unit`` designs, and whether ``--park-status`` was given."""

    columns: frozenset[str] = frozenset()
    statuses: frozenset[str] = frozenset()
    units: frozenset[str] = frozenset()
    park_status: bool = False
    priority_order: bool = False
    unlimited_max_attempts: bool = False
    time_zone: bool = False

    @classmethod
    def of(
        cls,
        *,
        columns: Iterable[str] = (),
        statuses: Iterable[str] = (),
        park_status: str | None = None,
        units: Iterable[str] = (),
        priority_order: str | None = None,
        unlimited_max_attempts: str | None = None,
        time_zone: str | None = None,
    ) -> Given:
        def designs(values: Iterable[str]) -> frozenset[str]:
            return frozenset(v.partition("=")[0].strip() for v in values)

        return cls(
            designs(columns),
            designs(statuses),
            designs(units),
            park_status is not None,
            priority_order is not None,
            unlimited_max_attempts is not None,
            time_zone is not None,
        )

    def __bool__(self) -> bool:
        return bool(
            self.columns
            or self.statuses
            or self.units
            or self.park_status
            or self.priority_order
            or self.unlimited_max_attempts
            or self.time_zone
        )


def _unlimited(value: str | None) -> int | None:
    """--unlimited-max-attempts as typed: an integer, or empty (every value a limit again)."""
    if value is None or not value.strip():
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise errors.UsageError(
            f"--unlimited-max-attempts {value!r}: give the max_attempts value that means no "
            "limit, e.g. 0 (or '' for none)"
        ) from None


def _pairs(
    values: Iterable[str],
    allowed: tuple[str, ...],
    option: str,
    *,
    keep_same: bool = False,
    shape: str = "DESIGN=ACTUAL, e.g. status=state",
) -> dict[str, str]:
    result: dict[str, str] = {}
    for value in values:
        design, sep, actual = value.partition("=")
        design, actual = design.strip(), actual.strip()
        if not sep or not design or not actual:
            raise errors.UsageError(f"{option} {value!r}: give {shape}")
        if design not in allowed:
            named = allowed + ((*OPTIONAL_COLUMNS, PRIORITY) if option == "--column" else ())
            named += (CANCELLED,) if option == "--status" else ()
            raise errors.UsageError(
                f"{option} {value!r}: {design!r} is not one of {', '.join(named)}"
            )
        if design in result and result[design] != actual:
            raise errors.UsageError(f"{option}: {design} given twice ({result[design]}, {actual})")
        if actual != design or keep_same:
            result[design] = actual
    return result


def _distinct(names: dict[str, str], option: str, what: str) -> None:
    seen: dict[str, str] = {}
    for design, actual in names.items():
        if actual in seen:
            raise errors.UsageError(
                f"{option}: {seen[actual]} and {design} would both be the {what} {actual!r}"
            )
        seen[actual] = design
