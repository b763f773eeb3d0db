"""What the operator's writes say, in words (stderr): the question before a write, the
outcomes said apart and the totals line that counts them and says why some were not written,
what a filter of ``requeue``/``fail``/``cancel`` matched and what became of it,
``quarantine``'s dry run, ``policy`` per kind or queue. Pure: counts and names in, lines
out (the workflows, ``ops.by_hand``, ``ops.manual``, ``ops.policy``, give them as data)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Question:
    """A write's question, and the title of the rows it shows."""

    question: str
    title: str


def question(verb: str, count: int) -> Question:
    """The question before an operator write of ``count`` jobs (``verb``: requeue, ...)."""
    return Question(f"{verb.capitalize()} {count} job(s)?", f"about to {verb}")


# outcome -> (singular, plural), in the order a totals line names them
_COUNTED = {
    "requeued": ("requeued", "requeued"),
    "failed": ("failed", "failed"),
    "cancelled": ("cancelled", "cancelled"),
    "quarantined": ("quarantined", "quarantined"),
    "policy_changed": ("policy changed", "policies changed"),
    "conflict": ("conflict", "conflicts"),
    "refused": ("refused", "refused"),
    "locked": ("locked", "locked"),
    "kept_back": ("kept back", "kept back"),
    "not_found": ("not found", "not found"),
}


def totals(outcomes: Sequence[str | None], details: Sequence[str]) -> str | None:
    """The totals line of an operator write when anything was not written (a conflict, a
    refusal, a lock, a missing job): every outcome counted, each kind not written with why,
    e.g. ``2 requeued, 1 conflict (changed since the review; nothing written for it)``.
    None when every job was done."""
    counts = {o: outcomes.count(o) for o in _COUNTED if o in outcomes}
    if all(o in WRITTEN for o in counts):
        return None
    parts = []
    for outcome, n in counts.items():
        one, many = _COUNTED[outcome]
        text = f"{n} {one if n == 1 else many}"
        if outcome not in WRITTEN:
            said = {d for o, d in zip(outcomes, details, strict=True) if o == outcome}
            text += f" ({_why(outcome, said)}; nothing written for {'it' if n == 1 else 'them'})"
        parts.append(text)
    return ", ".join(parts)


def _why(outcome: str, details: set[str]) -> str:
    """Why the jobs of one outcome were not written, in a few words."""
    if outcome == "conflict":
        if all(d.startswith("attempt token is") for d in details):
            return "not the attempt token expected"
        review = all("review" in d for d in details)
        return "changed since the review" if review else "changed since it was read"
    if outcome == "locked":
        return "row locked by another session"
    if outcome == "kept_back":
        return "an application trigger kept it back or changed it"
    if outcome == "not_found":
        return "no such job"
    if len(details) == 1:  # refused, all for one reason
        (detail,) = details
        return detail.split(" (", 1)[0].split(":", 1)[0]
    return "see each row's detail"


# the outcomes that wrote (ops.outcomes: exit 0): counted, with no "nothing written"
WRITTEN = frozenset({"requeued", "failed", "cancelled", "quarantined", "policy_changed"})


def apart(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Lines for stderr, where a redirected stdout would hide them, of the results an
    operator write says apart (``manual.Report.apart``: locked, not found, an id two rows
    hold)."""
    return [
        f"jobctl: job {r['id']}: {r['detail']}"
        if r["outcome"] == "locked"
        else f"jobctl: {r['detail']}"
        for r in results
    ]


def report_totals(results: Sequence[Mapping[str, Any]], *, said_apart: bool) -> str | None:
    """An operator write's totals line (``totals``), or None when one job's line said apart
    (``said_apart``) said it all."""
    if len(results) == 1 and said_apart:
        return None
    return totals([r["outcome"] for r in results], [r["detail"] for r in results])


def refused(count: int, first_id: object, first_detail: str) -> str:
    """How many jobs a filter matched that the rules leave out, and the first reason."""
    return (
        f"{count} matching job(s) left out: the rules refuse them (job {first_id}: {first_detail})"
    )


def nothing_matched(action: str, *, left_out: bool = False) -> str:
    """A filter that lists no job: none matched, or (``left_out``) every one it matched is
    left out (the lines before say why)."""
    if left_out:
        return f"no job left to {action}: every job the filter matches is left out"
    return f"no job matches the filter: nothing to {action}"


def matched_written(count: int) -> str:
    """A filter's jobs written with --yes, before their outcomes."""
    return f"{count} job(s) matched the filter, each written fenced as listed"


def matched(
    action: str, count: int, *, limit: int | None, saved: object | None = None, again: str = ""
) -> str:
    """A filter's jobs listed (``limit``: the --limit they reached, None: all of them) and,
    with ``saved``, the plan saved and the command that applies it (repeating ``again``, the
    global options); else the next step."""
    more = f" (the first {limit}: --limit N for more)" if limit is not None else ""
    if saved is not None:
        reason = " --reason ..." if action != "requeue" else ""
        return (
            f"{count} job(s) match{more}; plan saved to {saved}: apply it with "
            f"jobctl {again}{action} --plan {saved}{reason}"
        )
    return (
        f"{count} job(s) match{more}; nothing changed: --yes to {action} exactly these, "
        f"or --save-plan FILE to review them first"
    )


def quarantine_dry_run(count: int) -> str:
    """``quarantine`` without --commit: how many jobs it would switch."""
    return f"dry run: {count} job(s) would switch to manual; nothing changed"


def policy_removed(dimension: str, value: str, gone: bool) -> str:
    """``policy --kind K --remove`` (or --queue): removed, or there was none."""
    if gone:
        return f"policy of {dimension} {value} removed: its jobs' rows decide"
    return f"no policy recorded for {dimension} {value}: nothing changed"


def policy_recorded(dimension: str, value: str, policy: str) -> str:
    """``policy --kind K --auto|--manual`` (or --queue): recorded."""
    manual = ": reclaim treats its jobs as manual" if policy == "manual" else ""
    return f"{dimension} {value}: policy {policy}, recorded{manual}"
