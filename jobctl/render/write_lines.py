"""What the operator's writes say, in words (stderr): the question before a write, what a
filter of ``requeue``/``fail``/``cancel`` matched and what became of it, ``quarantine``'s dry
run, ``policy`` per kind or queue. Pure: counts and names in, lines out (the workflows,
``ops.by_hand``, ``ops.manual``, ``ops.kind_policy``, give them as data)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Question:
    """A write's question, and the title of the rows it shows."""

    question: str
    title: str


def question(verb: str, count: int) -> Question:
    """The question before an operator write of ``count`` jobs (``verb``: requeue, ...)."""
    return Question(f"{verb.capitalize()} {count} job(s)?", f"about to {verb}")


def nothing_matched(action: str) -> str:
    """A filter that lists no job."""
    return f"no job matches the filter: nothing to {action}"


def matched_written(count: int) -> str:
    """A filter's jobs written with --yes, before their outcomes."""
    return f"{count} job(s) matched the filter, each written fenced as listed"


def matched(action: str, count: int, *, limit: int | None, saved: object | None = None) -> str:
    """A filter's jobs listed (``limit``: the --limit they reached, None: all of them) and,
    with ``saved``, the plan saved and the command that applies it; else the next step."""
    more = f" (the first {limit}: --limit N for more)" if limit is not None else ""
    if saved is not None:
        reason = " --reason ..." if action != "requeue" else ""
        return (
            f"{count} job(s) match{more}; plan saved to {saved}: apply it with "
            f"jobctl {action} --plan {saved}{reason}"
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
