"""What a reclaim says, in words: the question before a commit (``asked``); under its table
what it did (or would do), on one database (``OneDatabase``) or across targets, each and all
(``AcrossTargets``): ``said`` words either; the next step (and the hint under ``stuck``, the
plan saved); when its requeued jobs return (--spread); what a confirmed commit left, and the
rows whose update the database refused. Pure: counts in, lines out (the counting is
``ops.reclaim.tally``'s; the workflow, ``ops.reclaim.run``, yields these as data)."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence

ByTarget = tuple[tuple[str, int, int | None], ...]  # a target's name, its rows, how many requeue


@dataclasses.dataclass(frozen=True)
class Question:
    """What a commit asks before it writes: ``total`` rows, ``requeue`` of them requeued (None:
    a saved plan's, not counted by action); ``plan``: the saved plan it applies (None: the
    dry run just read, whose rows the question shows); across targets, ``by_target`` each
    target's rows (and how many requeue, a preview's), ``not_on`` the targets whose preview
    failed (None: one database)."""

    total: int
    requeue: int | None = None
    plan: object | None = None
    by_target: ByTarget | None = None
    not_on: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Asking:
    """A question in words: the line said before it (None: none), the question, and the
    title of the rows it shows."""

    before: str | None
    question: str
    title: str


PREVIEW_TITLE = "about to reclaim (the dry run, now)"


def asked(q: Question) -> Asking:
    """The words of a commit's question (one database, or across targets with ``by_target``)."""
    before = None
    if q.by_target is not None:
        before = "by target: " + ", ".join(
            f"{name} {n}"
            if requeue is None
            else f"{name} {n} ({requeue} requeue, {n - requeue} fail)"
            for name, n, requeue in q.by_target
        )
    on = ""
    if q.by_target is not None:
        not_on = f", not on {', '.join(q.not_on)} (failed)" if q.not_on else ""
        on = f" on {len(q.by_target)} target(s){not_on}"
    if q.plan is not None:
        return Asking(before, f"Apply plan {q.plan}: reclaim up to {q.total} job(s){on}?", "")
    if q.by_target is not None or q.requeue is None:
        return Asking(before, f"Reclaim {q.total} expired job(s){on}?", PREVIEW_TITLE)
    fail = q.total - q.requeue
    return Asking(
        before,
        f"Reclaim {q.total} expired job(s): {q.requeue} requeue, {fail} fail?",
        PREVIEW_TITLE,
    )


@dataclasses.dataclass(frozen=True)
class OneDatabase:
    """What one database's reclaim did (or, a dry run, would do): its ``counts`` (requeue,
    fail, skipped), where it parks (``park_status``), its --spread, ``note`` (a dry run read
    on a standby), the leases that expired after a confirmed commit's preview
    (``expired_after``) and the rows whose update raised (``left_alone``)."""

    counts: collections.Counter[str]
    committed: bool
    park_status: str | None = None
    spread: dt.timedelta = dt.timedelta(0)
    note: str | None = None
    expired_after: int = 0
    left_alone: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class AcrossTargets:
    """What a reclaim across targets did (or would do): each target's ``counts`` and where
    each parks (``parks``)."""

    counts: dict[str, collections.Counter[str]]
    parks: dict[str, str | None]
    committed: bool


def said(done: OneDatabase | AcrossTargets, again: str = "") -> list[str]:
    """The lines under a reclaim's table, on one database or across targets (the commands
    they name repeating ``again``, the global options typed)."""
    if isinstance(done, AcrossTargets):
        return across_targets(done.counts, done.parks, committed=done.committed, again=again)
    lines = one_database(
        done.counts,
        done.committed,
        park_status=done.park_status,
        spread=done.spread,
        note=done.note,
        again=again,
    )
    after = [expired_after(done.expired_after, again), left_alone(done.left_alone)]
    return [*lines, *filter(None, after)]


def summary_line(
    counts: collections.Counter[str],
    committed: bool,
    *,
    park_status: str | None = None,
    some_parked: bool = False,
) -> str:
    """What a reclaim did (or would do), in one line for stderr; ``park_status``: where
    what it does not retry goes instead of failed (schema apply --park-status), if set;
    ``some_parked``: a total over targets some of which park (failed or parked)."""
    requeue, fail, skipped = counts["requeue"], counts["fail"], counts["skipped"]
    failed = _failed_word(park_status, some_parked)
    why = f" ({SKIPPED_WHY})" if skipped else ""
    if committed:
        return f"reclaimed: {requeue} requeued, {fail} {failed}, {skipped} skipped{why}"
    line = f"dry run: {requeue} would be requeued, {fail} {failed}, {skipped} skipped{why}"
    line += "; nothing changed"
    return line if sum(counts.values()) else f"{line}; nothing to reclaim"


SKIPPED_WHY = "nothing written for them: each row's skipped says why"


def _failed_word(park_status: str | None, some_parked: bool) -> str:
    if some_parked and not park_status:
        return "failed or parked"
    return f"parked in {park_status}" if park_status else "failed"


def next_step(
    counts: collections.Counter[str],
    committed: bool,
    *,
    park_status: str | None = None,
    some_parked: bool = False,
    again: str = "",
) -> str | None:
    """After a commit that failed or parked jobs, the next step (one line for stderr): they
    now wait for a human, and ``jobctl review`` lists them (repeating ``again``, the global
    options typed). None when there is none."""
    fail = counts["fail"]
    if not committed or not fail:
        return None
    failed = _failed_word(park_status, some_parked)
    return (
        f"next: {fail} job(s) {failed} by this reclaim await a human: "
        f"jobctl {again}review lists them"
    )


def spread_line(
    counts: collections.Counter[str], spread: dt.timedelta, committed: bool
) -> str | None:
    """With --spread: when the requeued jobs return (each batch's spread evenly over it)."""
    requeue = counts["requeue"]
    if not spread or not requeue:
        return None
    seconds = spread.total_seconds()
    rate = f"about {requeue / seconds:.1f} per second" if seconds else "at once"
    verb = "return" if committed else "would return"
    return (
        f"paced: the {requeue} requeued job(s) {verb} spread evenly over the next "
        f"{seconds:g}s with jitter ({rate}), not all at once"
    )


def one_database(
    counts: collections.Counter[str],
    committed: bool,
    *,
    park_status: str | None,
    spread: dt.timedelta,
    note: str | None = None,
    again: str = "",
) -> list[str]:
    """One database's lines under its reclaim's table: what it did (or would do), the next
    step, when the requeued jobs return (--spread), and ``note`` (a dry run read on a standby:
    the commit must run on the primary)."""
    said = [
        summary_line(counts, committed, park_status=park_status),
        next_step(counts, committed, park_status=park_status, again=again),
        spread_line(counts, spread, committed),
        note,
    ]
    return [line for line in said if line]


def across_targets(
    counts: dict[str, collections.Counter[str]],
    parks: dict[str, str | None],
    *,
    committed: bool,
    again: str = "",
) -> list[str]:
    """What a reclaim across targets did (or would do): each target's line (its park status
    named, as one reclaim's line does), the total over several, and the next step."""

    said = []
    for name, tally in counts.items():
        line = summary_line(tally, committed, park_status=parks.get(name))
        said.append(f"target {name}: {line}")
    total: collections.Counter[str] = sum(counts.values(), collections.Counter())
    some_parked = any(parks.get(name) for name in counts)
    if len(counts) > 1:
        line = summary_line(total, committed, some_parked=some_parked)
        said.append(f"all {len(counts)} targets: {line}")
    names = list(counts)
    step = next_step(
        total,
        committed,
        park_status=parks.get(names[0]) if len(names) == 1 else None,
        some_parked=len(names) > 1 and some_parked,
        again=again,
    )
    if step is not None:
        said.append(f"{step} (with the same target options)")
    return said


def expired_after(count: int, again: str = "") -> str | None:
    """After a confirmed commit (it wrote exactly the rows its question showed): the leases
    that expired while it asked, which nobody confirmed, and the command that shows them
    (repeating ``again``, the global options typed)."""
    if not count:
        return None
    return f"{count} more lease(s) expired after the preview, left: jobctl {again}reclaim --dry-run"


LEFT_ALONE_NAMED = 10  # ids the line names; the rows themselves say the rest


def left_alone(ids: Sequence[str]) -> str | None:
    """The rows a commit left as they were (their update refused, held past the timeout, or
    kept back or undone by a trigger), in one line naming the first of them (None when none
    was): exit 1, the rest done."""
    if not ids:
        return None
    named = ", ".join(ids[:LEFT_ALONE_NAMED])
    more = f" and {len(ids) - LEFT_ALONE_NAMED} more" if len(ids) > LEFT_ALONE_NAMED else ""
    return (
        f"partial: {len(ids)} job(s) left as they were (a trigger, a constraint or a lock of "
        f"the application's; each row's skipped says why): {named}{more}; the others "
        "reclaimed"
    )


def reclaim_hint(
    found: int,
    holding: Sequence[str] | None = None,
    total: int | None = None,
    again: str = "",
) -> str:
    """Under ``stuck``'s table: how to preview the reclaim of what it found (``holding``: the
    targets holding rows, across targets; None: one database; ``total``: every job the
    filter matched, when a --limit showed fewer; ``again``: the global options the command
    repeats, as ``Invocation.again`` gives them)."""
    if holding is None:
        shown = f"showing {found} of {total} job(s) (--limit)" if total else f"{found} job(s)"
        return f"{shown}; preview the reclaim with: jobctl {again}reclaim --dry-run"
    return (
        f"{found} job(s) on {len(holding)} target(s); preview the reclaim with: "
        f"jobctl {_target_options(holding)} {again}reclaim --dry-run"
    )


def plan_line(path: object, targets: Sequence[str] | None, again: str = "") -> str | None:
    """Where a dry run's plan was saved (``path``), and the command that applies it
    (``targets``: the targets it was saved across; None: one database; ``again``: the global
    options it repeats). None without one."""
    if path is None:
        return None
    if targets is None:
        return f"plan saved to {path}: apply it with jobctl {again}reclaim --commit --plan {path}"
    return (
        f"plan of {len(targets)} target(s) saved to {path}: apply it with "
        f"jobctl {_target_options(targets)} {again}reclaim --commit --plan {path}"
    )


def _target_options(names: Iterable[str]) -> str:
    """The options that name these targets again, in a command to run next."""
    return " ".join(f"--target {name}" for name in names)
