"""The outcomes of an operator write (requeue, fail, cancel, policy, quarantine): each one's
exit code; pure. Their words (the totals line) are ``render.write_lines``'."""

from __future__ import annotations

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
