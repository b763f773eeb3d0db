"""``requeue``, ``fail`` and ``cancel``: what the operator asks (``Request``: the ids typed, a
saved review plan or a filter; why and how; the rules between its options, checked as it is
made, before anything is read) and their one workflow (``run``), the same path for all three:
the jobs decided (ids, a plan's rows, or what a filter lists), the question (yielded:
``manual.Asked``; the run goes on once resumed, closed instead: nothing written), then each
written fenced. What it did is the generator's return value: the outcomes (``manual.Report``)
or, on a filter, what it matched and what became of it (``Matched``). Example::

    request = Request("requeue", ("42",), reason="fixed", yes=True)
    report = manual.answered(run(s, request))  # --yes: nothing asked
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable, Generator, Sequence
from pathlib import Path

from jobctl import errors
from jobctl.db.session import Session
from jobctl.ops import bulk, manual, review
from jobctl.ops.manual import Action, Asked, Decision, Report

FILTER_OPTIONS = "--kind, --queue, --error, --status, --worker, --older-than, --no-lease"


@dataclasses.dataclass(frozen=True)
class Request:
    """What the operator asked of ``requeue``, ``fail`` or ``cancel`` (``action``): job ids
    as typed (``("-",)``: read from stdin, by the command, then made again with them), a
    saved review plan (``plan``), or a filter (``which``, saved as a plan with
    ``save_plan``); the ``reason``, a requeue's ``delay`` and ``spread``, a cancel's ``park``,
    the attempt expected (``expect_token``), ``force`` (a live lease: always, for a cancel)
    and ``yes`` (asks nothing). Checked as it is made (``check``)."""

    action: Action
    job_ids: tuple[str, ...] = ()
    plan: Path | None = None
    reason: str | None = None
    delay: dt.timedelta = dt.timedelta(0)
    park: bool = False
    expect_token: uuid.UUID | None = None
    force: bool = False
    yes: bool = False
    which: bulk.BulkFilter = dataclasses.field(default_factory=bulk.BulkFilter)
    save_plan: Path | None = None
    spread: dt.timedelta = dt.timedelta(0)

    def __post_init__(self) -> None:
        self.check()

    @property
    def on_filter(self) -> bool:
        """The jobs a filter lists (or nothing given: the filter's rule says what is missing)."""
        return bool(self.which) or not (self.job_ids or self.plan is not None)

    @property
    def forced(self) -> bool:
        """Whether a live lease is taken: --force, or a cancel (a live lease is its point)."""
        return self.force or self.action == "cancel"

    def check(self) -> None:
        """The rules between options: UsageError (exit 2) before anything is read."""
        if self.on_filter:
            self._check_filter()
            return
        if self.save_plan is not None:
            raise errors.UsageError(
                "--save-plan saves the jobs a filter lists (--kind, --queue, --error ...): "
                "with ids, act on them directly"
            )
        if self.plan is not None and (self.job_ids or self.expect_token is not None):
            raise errors.UsageError("--plan applies exactly the plan's rows: no ids with it")
        if "-" in self.job_ids and self.job_ids != ("-",):
            raise errors.UsageError("- reads every id from stdin: give no other id with it")
        need_reason(self.action, self.reason)
        if self.expect_token is not None and len(self.job_ids) > 1:
            raise errors.UsageError("--expect-token names one attempt: give one job id with it")

    def _check_filter(self) -> None:
        if self.job_ids or self.plan is not None or self.expect_token is not None:
            raise errors.UsageError(
                f"give job ids (or --plan FILE) or a filter ({FILTER_OPTIONS}), not both"
            )
        if self.save_plan is not None and self.yes:
            raise errors.UsageError(
                "--save-plan lists and saves, --yes writes: give one (apply a plan with --plan)"
            )
        if self.yes:
            need_reason(self.action, self.reason)
        if not self.which:
            raise errors.UsageError(
                f"{self.action} needs job ids, - (stdin), --plan FILE or a filter "
                f"({FILTER_OPTIONS})"
            )
        self.which.check()

    @property
    def from_stdin(self) -> bool:
        """The ids are to be read from stdin (``-``)."""
        return self.job_ids == ("-",)


def need_reason(action: Action, reason: str | None) -> None:
    """fail and cancel need a reason: it becomes the job's last_error (UsageError, exit 2)."""
    if action != "requeue" and not (reason or "").strip():
        raise errors.UsageError(f"{action} needs --reason: it becomes the job's last_error")


@dataclasses.dataclass
class Matched:
    """What a filter matched (``listed``) and what became of it: saved as a plan
    (``saved``), written (``report``, --yes), or neither (only listed)."""

    listed: bulk.Listed
    saved: Path | None = None
    report: Report | None = None


def run(s: Session, request: Request) -> Generator[Asked, None, Report | Matched]:
    """The write ``request`` asks for: on a filter, the jobs it lists (saved, written with
    --yes, or only listed); else the ids given or a saved plan's rows, each decided by the
    same rules, asked about once (unless ``request.yes``), then written fenced."""
    if request.from_stdin:
        raise errors.UsageError("- reads ids from stdin: the command reads them first")
    if request.on_filter:
        return (yield from _on_filter(s, request))
    if request.plan is not None:
        return (yield from _planned(s, request, request.plan))
    ids = s.job_ids(list(request.job_ids))
    decisions = [
        manual.decide(s, i, request.action, force=request.forced, expect_token=request.expect_token)
        for i in ids
    ]
    return (yield from _written(s, request, decisions))


def _written(
    s: Session, request: Request, decisions: list[Decision]
) -> Generator[Asked, None, Report]:
    """The one write of all three: asked about (unless --yes), each written fenced."""
    write = writer(s, request, decisions)
    return (yield from manual.act(s, request.action, decisions, write, ask=not request.yes))


def writer(
    s: Session, request: Request, decisions: Sequence[Decision]
) -> Callable[[Decision], Decision]:
    """How one decided job is written: a requeue paced over --spread (``paced_writer``), a
    fail or a cancel (parked with --park) at once."""
    if request.action == "requeue":
        return manual.paced_writer(
            s, decisions, reason=request.reason, delay=request.delay, spread=request.spread
        )
    return lambda d: manual.apply(
        s, d, request.action, reason=request.reason, delay=request.delay, park=request.park
    )


def _planned(s: Session, request: Request, path: Path) -> Generator[Asked, None, Report]:
    """``--plan``: every planned row decided by the rules of a direct command and written
    fenced on the row as reviewed; a row changed since (by the application, another
    operator, a worker) is a ``conflict``, one the rules refuse is ``refused``, and nothing
    is written for either. Exit code: the worst outcome."""
    with s.transaction(read_only=True):
        location = s.origin()
    planned = review.load_plan(path, location)
    decisions = review.planned_decisions(s, request.action, planned, force=request.forced)
    undecided = [d.outcome is None for d in decisions]  # eligible, as reviewed, when read
    report = yield from _written(s, request, decisions)
    for result, row, eligible in zip(report.results, planned, undecided, strict=True):
        if eligible and result["outcome"] == "conflict":  # it changed between read and write
            result["detail"] = review.conflict_detail(s, result["id"], row)
    return report


def _on_filter(s: Session, request: Request) -> Generator[Asked, None, Matched]:
    """On a filter: the jobs it lists and their count; then saved as a plan, or (--yes)
    exactly those written, each fenced as listed (confirmed already: nothing asked)."""
    listed = bulk.candidates(s, request.action, request.which, force=request.forced)
    if not listed.rows:
        return Matched(listed)
    if request.save_plan is not None:
        with s.transaction(read_only=True):
            review.save_plan(request.save_plan, s.origin(), listed.rows)  # type: ignore[arg-type]
        return Matched(listed, saved=request.save_plan)
    if not request.yes:
        return Matched(listed)
    decisions = list(listed.eligible)
    write = writer(s, request, decisions)
    report = yield from manual.act(s, request.action, decisions, write, ask=False)
    return Matched(listed, report=report)
