"""What ``jobctl reclaim``'s workflow yields as it goes (``run.run``, a generator the command
consumes), as data: a line a lower layer said (``Said``), the targets whose preview failed
(``Unreachable``), the question before a commit (``Asked``: the run goes on once the person
agreed; closing the generator instead writes nothing), the batches under way (``Run``: drain
them) and, last, what it did (``Reclaimed``). The words are ``render.reclaim_lines``'."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from jobctl import errors
from jobctl.contract.shapes import ReclaimRow
from jobctl.ops import fleet
from jobctl.ops.reclaim.tally import Tally
from jobctl.render.reclaim_lines import AcrossTargets, OneDatabase, Question


@dataclasses.dataclass(frozen=True)
class Said:
    """A line a lower layer said as it went (a standby's notice, a newer install's)."""

    line: str


@dataclasses.dataclass(frozen=True)
class Unreachable:
    """The targets whose preview failed, before the question (not committed)."""

    outcomes: list[fleet.Outcome[Any]]


@dataclasses.dataclass(frozen=True)
class Asked:
    """The question before a commit, and the rows it shows (the dry run's first rows, or
    none for a saved plan: a ``one_database.Sample`` counts every row)."""

    question: Question
    rows: Sequence[ReclaimRow] = ()


@dataclasses.dataclass
class Run:
    """A reclaim under way: its batches (drain them), and how many rows are expected."""

    batches: Iterator[list[ReclaimRow]]
    # known after a commit's preview or from a plan; None for a dry run (streamed, not
    # counted ahead) and when --yes skipped the preview
    total: int | None
    # the optional columns a machine format's header holds, with no row too: those the
    # table maps (kind, queue), which its rows carry; across targets, whose mappings
    # differ, both (rows.RECLAIM_OPTIONAL_KEYS), empty where a target maps none
    optional: tuple[str, ...]
    # a confirmed commit's count once drained: how many leases expired after its preview
    # (which it left, as it was confirmed without them); None: nothing to read
    after: Callable[[], int] | None = None


@dataclasses.dataclass
class Reclaimed:
    """What the reclaim did, or (a dry run) would do, for the command to show, in this order:
    its ``tally`` (the rows a table shows, ``kept``, of its ``total``; None: nothing drained,
    no table) or, a dry run across targets in a machine format (``Request.whole`` None), every
    row with its target (``found``, printed at the end); what it counted (``summary``: the
    lines under the table; None: nothing to say); what the targets said and why any failed
    (``outcomes``); the ``plan`` saved (across ``plan_targets``). ``unreachable``: the
    targets that failed before the question (yielded then); ``unserved``: the targets whose
    service stopped on an error or never started; ``left_alone``: rows whose update raised;
    ``left_out``: the lines naming ids two rows hold."""

    tally: Tally | None = None
    found: list[ReclaimRow] | None = None
    summary: OneDatabase | AcrossTargets | None = None
    outcomes: list[fleet.Outcome[Any]] = dataclasses.field(default_factory=list)
    plan: Path | None = None
    plan_targets: list[str] | None = None
    unreachable: list[fleet.Outcome[Any]] = dataclasses.field(default_factory=list)
    unserved: list[str] = dataclasses.field(default_factory=list)
    left_alone: list[str] = dataclasses.field(default_factory=list)
    left_out: list[str] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when a target failed or was not served, a row's update raised, or an id two rows
        hold was left out (the picture is partial), else 0."""
        if self.unserved or self.left_alone or self.left_out:
            return errors.EXIT_ERROR
        return fleet.exit_code([*self.unreachable, *self.outcomes])


Step = Said | Unreachable | Asked | Run | Reclaimed  # what ``run.run`` yields
