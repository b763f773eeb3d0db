"""Who owns schema jobctl and what others may do in it.

The history is only worth what its owner is worth: jobctl's SECURITY DEFINER functions run as
their owner on every worker's write and insert into ``jobctl.events``/``jobctl.attempts``.
An application role that made a schema named ``jobctl`` first, owns one of its tables, may
create in it, holds more than ``SELECT`` on its tables or ``EXECUTE`` on its functions, or
has put a trigger, rule or policy on them, can rewrite the audit or run its own code as that
owner. So:

* ``schema apply`` and ``schema grants`` refuse to touch a ``jobctl`` schema holding anything
  owned by a role other than the one running them or a superuser (``apply_refusal``): a
  schema made by someone else is never adopted;
* ``schema check`` verifies that everything in it has one owner, that the others' privileges
  are the documented ones (``USAGE`` on the schema, ``SELECT`` on its tables; see
  docs/safety.md, "Who owns jobctl") and that nothing foreign sits on its tables
  (``problems``).

Names from the catalog reach messages only through ``safe_text.visible``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg

from jobctl import db, errors
from jobctl.contract import safe_text

# what a role other than the owner may hold on jobctl's objects: the readers' access
ALLOWED = {"schema": {"USAGE"}, "table": {"SELECT"}, "column": {"SELECT"}, "function": set()}
# the one table others write: the reclaimer's record of its passes (history migration 007),
# which schema grants --operator lets the reclaimer's role write; it is no job's history (a
# forged row can only make a stopped reclaimer look alive, or a live one stopped)
# and the one function others call: reclaim_batch's refusal of a row not written as meant
# (history 013), EXECUTE for PUBLIC (the default), since whichever role a reclaim writes as
# calls it; SECURITY INVOKER and reading nothing, it can only raise an error as its caller
ALLOWED_ON = {
    ("table", "reclaimer_passes"): {"SELECT", "INSERT", "UPDATE"},
    ("function", "refuse"): {"EXECUTE"},
}
# each jobs table's reclaimer function (schema grants --reclaimer: jobctl.reclaim_<table>_...):
# EXECUTE for the reclaimer role (never PUBLIC), and owned by jobctl's operator role when the
# installer is stronger than the table's owner (docs/safety.md, "The reclaimer role")
RECLAIMER_PREFIX = "reclaim_"
RECLAIMER_ALLOWED = {"EXECUTE"}


@dataclasses.dataclass(frozen=True)
class Owned:
    kind: str  # schema, table, sequence, index, view, function, type, operator
    name: str
    owner: str
    owner_is_superuser: bool
    owned_by_me: bool

    def said(self) -> str:
        shown = "jobctl" if self.kind == "schema" else f"jobctl.{self.name}"
        return f"{self.kind} {safe_text.visible(shown)}"


def owned(conn: psycopg.Connection[Any]) -> list[Owned]:
    """Schema jobctl (first) and every object in it, with its owner; [] when there is none."""
    with db.safe(conn):
        rows = db.rows(conn, "jobctl_owners")
    return [Owned(**row) for row in rows]


def apply_refusal(conn: psycopg.Connection[Any]) -> str | None:
    """Why schema apply or grants must not touch schema jobctl as it is, or None: an object
    in it owned by a role that is neither the current one nor a superuser (a schema, table or
    function made first by the application would be adopted as jobctl's), or anything
    foreign on it (``problems`` without the ownership consistency, which apply restores)."""
    objects = owned(conn)
    if not objects:
        return None
    foreign = [
        o for o in objects if not (o.owned_by_me or o.owner_is_superuser or _reclaimer_function(o))
    ]
    if foreign:
        first = foreign[0]
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        owner = safe_text.visible(first.owner)
        return (
            f"{first.said()}{more} is owned by role {owner}, not by you or a superuser: jobctl "
            f"does not adopt objects it did not make. If {owner} is the role that installed "
            f"jobctl, run schema apply as {owner}; if not, jobctl's history cannot be trusted "
            "there: inspect it, then DROP SCHEMA jobctl CASCADE (or rename it) and apply again"
        )
    # (EXECUTE on a function is left to apply: version 1's function had it, migration 002
    # revokes it; anything else lets a role plant objects or triggers there at any time)
    found = privilege_problems(conn, but_functions=True) + attached_problems(conn)
    if found:
        return (
            "schema jobctl is not as jobctl leaves it: "
            + "; ".join(found)
            + " (revoke or drop it, see docs/safety.md, 'Who owns jobctl')"
        )
    return None


def refuse_foreign(conn: psycopg.Connection[Any]) -> None:
    """``apply_refusal`` raised as a refusal (exit 2)."""
    why = apply_refusal(conn)
    if why is not None:
        raise errors.NothingDone(why)


def problems(conn: psycopg.Connection[Any]) -> tuple[list[str], str]:
    """What is wrong with who owns schema jobctl and what others may do there, and a line
    saying who owns it (for schema check)."""
    objects = owned(conn)
    if not objects:
        return ["schema jobctl is missing (run jobctl schema apply)"], ""
    owner = objects[0].owner  # the schema's
    found = [
        f"{o.said()} is owned by {safe_text.visible(o.owner)}, the schema by "
        f"{safe_text.visible(owner)}"
        for o in objects[1:]
        if o.owner != owner and not _reclaimer_function(o)
    ]
    found += privilege_problems(conn) + attached_problems(conn)
    kind = "a superuser" if objects[0].owner_is_superuser else "not a superuser"
    return found, f"every object owned by {safe_text.visible(owner)} ({kind})"


def privilege_problems(conn: psycopg.Connection[Any], *, but_functions: bool = False) -> list[str]:
    """Privileges others hold on jobctl's objects beyond the readers' (``ALLOWED``);
    ``but_functions``: not those on functions."""
    with db.safe(conn):
        rows = db.rows(conn, "jobctl_grants")
    excess: dict[tuple[str, str, str], list[str]] = {}
    for row in rows:
        if but_functions and row["kind"] == "function":
            continue
        allowed = ALLOWED_ON.get((row["kind"], row["name"])) or ALLOWED.get(row["kind"], set())
        if (
            row["kind"] == "function"
            and row["name"].startswith(RECLAIMER_PREFIX)
            and row["grantee"] != "PUBLIC"
        ):
            allowed = RECLAIMER_ALLOWED
        if row["privilege"] not in allowed:
            key = (row["kind"], row["name"], row["grantee"])
            excess.setdefault(key, []).append(row["privilege"])
    return [
        f"{safe_text.visible(grantee)} holds {', '.join(privileges)} on {kind} "
        + safe_text.visible("jobctl" if kind == "schema" else f"jobctl.{name}")
        for (kind, name, grantee), privileges in excess.items()
    ]


def _reclaimer_function(o: Owned) -> bool:
    """A table's reclaimer function, which schema grants gives jobctl's operator role (not a
    superuser): no role but the schema's owner can make one there (CREATE on schema jobctl)."""
    return o.kind == "function" and o.name.startswith(RECLAIMER_PREFIX) and not o.owner_is_superuser


def attached_problems(conn: psycopg.Connection[Any]) -> list[str]:
    """Triggers, rules, policies or row security that others put on jobctl's tables."""
    with db.safe(conn):
        rows = db.rows(conn, "jobctl_attached")
    return [
        f"{row['kind']} "
        + (f"{safe_text.visible(row['name'])} " if row["kind"] != "row security" else "")
        + f"on jobctl.{safe_text.visible(row['on_table'])} (jobctl puts none there)"
        for row in rows
    ]
