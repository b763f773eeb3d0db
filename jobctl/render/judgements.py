"""The words for the judgements the database makes about a job (the blocks effective_policy,
policy_source, awaiting_review and review_why of ``sql/queries.sql``): one wording for every
screen, page and sentence that shows them. Pure: rows in, text out; the judging is SQL's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# review_why's values, as a short word for a narrow column and as a phrase for a sentence
WHY_WORDS = {"manual_policy": "manual", "attempts_exhausted": "attempts", "parked": "parked"}
WHY_PHRASES = {
    "manual_policy": "its policy is manual",
    "attempts_exhausted": "it used all its attempts",
    "parked": (
        "reclaim parked it: its claim was older than --park-older-than, or its policy has "
        "become auto since"
    ),
}


def policy(row: Mapping[str, Any]) -> str:
    """A job's effective policy as screens show it: ``auto``, ``manual``, or ``manual (kind)``
    / ``manual (queue)`` when a recorded policy of its kind or queue makes it manual. A row
    without the judgement (an older server's reply) shows its own recovery_policy."""
    effective = row.get("effective_policy")
    if effective is None:
        return str(row.get("recovery_policy"))
    source = row.get("policy_from")
    if effective == "manual" and source in ("kind", "queue"):
        return f"manual ({source})"
    return str(effective)


def why(row: Mapping[str, Any], *, short: bool = False) -> str:
    """Why a job awaits review (review_why) as a screen shows it: ``manual (kind)`` when its
    kind or queue made it manual; ``short``: one word for a narrow column."""
    value = str(row.get("why") or row.get("review_why") or "")
    if value == "manual_policy" and row.get("policy_from") in ("kind", "queue"):
        return f"manual ({row['policy_from']})"
    if short:
        return WHY_WORDS.get(value, value)
    return value


def why_phrase(row: Mapping[str, Any]) -> str:
    """Why a job awaits review, for a sentence (explain's story)."""
    value = str(row.get("why") or row.get("review_why") or "")
    if value == "manual_policy" and row.get("policy_from") in ("kind", "queue"):
        return f"its {row['policy_from']}'s recorded policy is manual"
    return WHY_PHRASES.get(value, value)
