"""What a reclaim says under its table, in words: what it did (or would do), on one database
(``one_database``) or across targets, each and all (``across_targets``); the next step (and
the hint under ``stuck``, the plan saved); when its requeued jobs return (--spread); what a
confirmed commit left, and the rows whose update the database refused. Pure: counts in,
lines out (the counting is ``ops.reclaim.tally``'s)."""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Iterable, Sequence


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
) -> str | None:
    """After a commit that failed or parked jobs, the next step (one line for stderr): they
    now wait for a human, and ``jobctl review`` lists them. None when there is none."""
    fail = counts["fail"]
    if not committed or not fail:
        return None
    failed = _failed_word(park_status, some_parked)
    return f"next: {fail} job(s) {failed} by this reclaim await a human: jobctl review lists them"


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
) -> list[str]:
    """One database's lines under its reclaim's table: what it did (or would do), the next
    step, when the requeued jobs return (--spread), and ``note`` (a dry run read on a standby:
    the commit must run on the primary)."""
    said = [
        summary_line(counts, committed, park_status=park_status),
        next_step(counts, committed, park_status=park_status),
        spread_line(counts, spread, committed),
        note,
    ]
    return [line for line in said if line]


def across_targets(
    counts: dict[str, collections.Counter[str]],
    parks: dict[str, str | None],
    *,
    committed: bool,
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
    )
    if step is not None:
        said.append(f"{step} (with the same target options)")
    return said


def expired_after(count: int) -> str | None:
    """After a confirmed commit (it wrote exactly the rows its question showed): the leases
    that expired while it asked, which nobody confirmed, and the command that shows them."""
    if not count:
        return None
    return f"{count} more lease(s) expired after the preview, left: jobctl reclaim --dry-run"


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


def reclaim_hint(found: int, holding: Sequence[str] | None = None, total: int | None = None) -> str:
    """Under ``stuck``'s table: how to preview the reclaim of what it found (``holding``: the
    targets holding rows, across targets; None: one database; ``total``: every job the
    filter matched, when a --limit showed fewer)."""
    if holding is None:
        shown = f"showing {found} of {total} job(s) (--limit)" if total else f"{found} job(s)"
        return f"{shown}; preview the reclaim with: jobctl reclaim --dry-run"
    return (
        f"{found} job(s) on {len(holding)} target(s); preview the reclaim with: "
        f"jobctl {_target_options(holding)} reclaim --dry-run"
    )


def plan_line(path: object, targets: Sequence[str] | None) -> str | None:
    """Where a dry run's plan was saved (``path``), and the command that applies it
    (``targets``: the targets it was saved across; None: one database). None without one."""
    if path is None:
        return None
    if targets is None:
        return f"plan saved to {path}: apply it with jobctl reclaim --commit --plan {path}"
    return (
        f"plan of {len(targets)} target(s) saved to {path}: apply it with "
        f"jobctl {_target_options(targets)} reclaim --commit --plan {path}"
    )


def _target_options(names: Iterable[str]) -> str:
    """The options that name these targets again, in a command to run next."""
    return " ".join(f"--target {name}" for name in names)
