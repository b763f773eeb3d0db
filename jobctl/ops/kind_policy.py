"""A recovery policy per kind or queue: ``jobctl policy --kind K --manual`` makes
reclaim's one decision treat every job of kind K as manual (its row's own policy aside: manual
wins, from either), recorded in jobctl's schema (``jobctl.kind_policies``, history 006) with
who and why, every change beside it (``jobctl.kind_policy_events``). Example::

    kind_policy.set_policy(s, "kind", "charge_card", "manual", reason="double charges")
    kind_policy.listed(s)   # [{"dimension": "kind", "value": "charge_card", ...}]
"""

from __future__ import annotations

from typing import Any

import psycopg

from jobctl import db, errors
from jobctl.contract.shapes import Row
from jobctl.db.session import Session

# what the refusal of another role says (they steer reclaim for every job of the kind)
RECORDED = "policies per kind (they steer reclaim for every job of the kind)"

POLICIES = ("auto", "manual")


def _ready(s: Session, dimension: str) -> None:
    """UsageError (exit 2) when the table maps no such column; SchemaMissing (exit 1) before
    history 006."""
    if dimension not in ("kind", "queue"):
        raise errors.UsageError(f"a policy per {dimension!r}: give --kind or --queue")
    s.table.mapping.require(dimension, f"policy --{dimension}")
    if not s.table.kind_policies:
        raise errors.SchemaMissing(
            "policies per kind need jobctl's history at version 6: run jobctl schema apply"
        )


def set_policy(s: Session, dimension: str, value: str, policy: str, *, reason: str | None) -> Row:
    """Record ``policy`` for the jobs whose ``dimension`` (kind, queue) is ``value``, and the
    change; refused (exit 2) to a role that does not own schema jobctl."""
    _ready(s, dimension)
    if policy not in POLICIES:
        raise errors.UsageError(f"policy {policy!r}: give auto or manual")
    params = {
        "job_table": s.table.qualified,
        "dimension": dimension,
        "value": value,
        "policy": policy,
        "reason": reason,
    }
    return owner_write(s, "kind_policy_set", params, reason, recorded=RECORDED)[0]


def remove(s: Session, dimension: str, value: str, *, reason: str | None) -> bool:
    """Remove the kind's (or queue's) policy: its jobs' rows decide again. False: none was set."""
    _ready(s, dimension)
    params = {"job_table": s.table.qualified, "dimension": dimension, "value": value}
    return bool(
        owner_write(s, "kind_policy_remove", params | {"reason": reason}, reason, recorded=RECORDED)
    )


def listed(s: Session) -> list[Row]:
    """The table's policies per kind and queue (none before history 006)."""
    if not s.table.kind_policies:
        return []
    with s.transaction(read_only=True):
        return s.rows("kind_policy_list", {"job_table": s.table.qualified})


def owner_write(
    s: Session, statement: str, params: dict[str, Any], reason: str | None, *, recorded: str
) -> list[Row]:
    """A write to what schema jobctl's owner alone writes (policies per kind, pauses): the
    statement's rows, in a short transaction with the reason; another role refused (exit 2)
    in one line saying what is ``recorded`` there and why only its owner writes it."""
    with db.mapped_errors():
        try:
            with s.transaction(reason=reason):
                return s.rows(statement, params)
        except psycopg.errors.InsufficientPrivilege:
            raise errors.Refused(
                f"{recorded} are recorded in schema jobctl, which only its owner writes: run "
                "this as the role that ran jobctl schema apply; nothing changed"
            ) from None
