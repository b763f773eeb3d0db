"""``jobctl policy``: what the operator asks (``Request``: jobs' policy by id, a policy per
kind or queue recorded or removed, or their list; the rules between its options, checked as
it is made, before anything is read) and its one workflow (``run``): a generator that
yields the question before a write by id (``manual.Asked``) and returns what it did, as
data (``Listed``, ``Removed``, ``Recorded``, or the outcomes: ``manual.Report``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Literal

from jobctl import errors
from jobctl.contract.shapes import Row
from jobctl.db.session import Session
from jobctl.ops import kind_policy, manual

Policy = Literal["auto", "manual"]


@dataclasses.dataclass(frozen=True)
class Request:
    """What the operator asked of ``jobctl policy``: the ``policy`` to set (None: neither
    --auto nor --manual) on ``job_ids``, or on every job of a ``kind`` or ``queue``
    (recorded; ``remove``: removed), or the recorded ones listed (``listing``)."""

    job_ids: tuple[str, ...] = ()
    policy: Policy | None = None
    reason: str | None = None
    yes: bool = False
    kind: str | None = None
    queue: str | None = None
    remove: bool = False
    listing: bool = False

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The rules between options: UsageError (exit 2) before anything is read. No
        default direction: a forgotten --manual must not turn a manual job auto (the unsafe
        way round), so a write without either is refused."""
        if not self.listing and not self.remove and self.policy is None:
            raise errors.UsageError("say which policy: --auto or --manual (there is no default)")
        if self.listing or self.kind is not None or self.queue is not None:
            if self.job_ids:
                raise errors.UsageError("give job ids or --kind/--queue/--list, not both")
            if not self.listing and self.kind is not None and self.queue is not None:
                raise errors.UsageError("give --kind or --queue, one at a time")
            return
        if self.remove:
            raise errors.UsageError("--remove removes a policy per kind: give --kind or --queue")
        if not self.job_ids:
            raise errors.UsageError("give job ids, or --kind K / --queue Q, or --list")

    @property
    def dimension(self) -> tuple[str, str]:
        """The kind or the queue whose policy is recorded or removed: (dimension, value)."""
        return ("kind", self.kind) if self.kind is not None else ("queue", self.queue or "")


@dataclasses.dataclass(frozen=True)
class Listed:
    """The policies recorded per kind and queue (``policy --list``)."""

    rows: list[Row]


@dataclasses.dataclass(frozen=True)
class Removed:
    """A kind's or queue's policy removed (``gone``), or none was recorded."""

    dimension: str
    value: str
    gone: bool


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A kind's or queue's policy recorded."""

    dimension: str
    value: str
    policy: Policy


Done = Listed | Removed | Recorded | manual.Report


def run(s: Session, request: Request) -> Generator[manual.Asked, None, Done]:
    """What ``request`` asks: the list, a kind's or queue's policy removed or recorded (in
    jobctl's schema, with who and why), or each job's set, fenced and audited (asked about
    first unless ``request.yes``)."""
    if request.listing:
        return Listed(kind_policy.listed(s))
    if request.job_ids:
        assert request.policy is not None  # (check)
        return (
            yield from manual.set_policies(
                s, request.job_ids, request.policy, reason=request.reason, ask=not request.yes
            )
        )
    dimension, value = request.dimension
    if request.remove:
        gone = kind_policy.remove(s, dimension, value, reason=request.reason)
        return Removed(dimension, value, gone)
    assert request.policy is not None  # (check)
    kind_policy.set_policy(s, dimension, value, request.policy, reason=request.reason)
    return Recorded(dimension, value, request.policy)
