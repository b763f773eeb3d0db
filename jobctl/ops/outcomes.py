"""The outcomes of an operator write (requeue, fail, cancel, policy, quarantine): each one's
exit code, and the totals line that counts them and says why some were not written; pure."""

from __future__ import annotations

from collections.abc import Sequence

from jobctl import errors

# outcome -> exit code of one id (the worst over several ids wins, see errors.worst_exit_code)
OUTCOME_EXIT = {
    "requeued": errors.EXIT_OK,
    "failed": errors.EXIT_OK,
    "cancelled": errors.EXIT_OK,
    "refused": errors.EXIT_USAGE,
    "conflict": errors.EXIT_CONFLICT,
    "not_found": errors.EXIT_ERROR,
    "locked": errors.EXIT_ERROR,
    "kept_back": errors.EXIT_ERROR,  # an application trigger or rule kept the write back
    "quarantined": errors.EXIT_OK,
    "policy_changed": errors.EXIT_OK,
}

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
    """The totals line of an operator write (see ``Report.totals``); pure."""
    counts = {o: outcomes.count(o) for o in _COUNTED if o in outcomes}
    if all(OUTCOME_EXIT[o] == errors.EXIT_OK for o in counts):
        return None
    parts = []
    for outcome, n in counts.items():
        one, many = _COUNTED[outcome]
        text = f"{n} {one if n == 1 else many}"
        if OUTCOME_EXIT[outcome] != errors.EXIT_OK:
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
