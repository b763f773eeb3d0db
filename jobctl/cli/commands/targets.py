"""``jobctl targets``: the named databases of the config file, where each is and its table
(never a password); ``--check`` connects to each at once (``fleet.across``).

Registered by ``cli``.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl import errors
from jobctl.cli import context, terminal
from jobctl.cli import options as opt
from jobctl.render import output, views
from jobctl.targets import Fleet, Target

if TYPE_CHECKING:
    from jobctl.ops import fleet


def targets_command(
    ctx: typer.Context,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Connect to each (at once): reachable, primary or standby, schema."
        ),
    ] = False,
    out: opt.Out = output.Output.table,
    fmt: opt.Format = None,
) -> None:
    """The named targets of the config file: where each is and its table (never a password).

    --check connects to each at once and says whether it answers, whether it is a primary
    or a standby, whether jobctl serves its table, and how many jobs are stuck there; exit 1
    when any fails. Example: jobctl targets --check
    """
    from jobctl import targets as config

    addressed = context.address(ctx)
    if isinstance(addressed, Fleet):
        chosen = list(addressed.targets)
    else:
        loaded = config.load()
        for line in loaded.warnings:
            terminal.say(line)
        chosen = (
            [loaded.targets[addressed.target]]
            if addressed.target
            else list(loaded.targets.values())
        )
        if not chosen:
            raise errors.UsageError(f"no targets: {loaded.known()}")
    found: list[dict[str, Any]] = [
        {"target": t.name, "where": t.where, "from": t.source, "table": t.settings.table}
        for t in chosen
    ]
    code = 0
    if check:
        from jobctl.ops import fleet

        outcomes = fleet.across(chosen, _checked)
        for row, o in zip(found, outcomes, strict=True):
            row |= o.value or {
                "reachable": False,
                "server": None,
                "role": None,
                "schema": None,
                "stuck": None,
                "problem": " ".join((fleet.failure_line(o).split(": ", 1)[1]).split()),
            }
        code = errors.EXIT_ERROR if any(not o.ok for o in outcomes) else 0
    for row, t in zip(found, chosen, strict=True):
        row.setdefault("problem", t.problem)
    columns = list(found[0]) if found else None
    terminal.emit(views.table(found, found, columns, views.TARGETS_VIEW), out, fmt)
    if out.tabular and fmt is None and terminal.on_terminal(sys.stdout):
        for row in found:  # each problem whole, not cut to the column
            if row["problem"]:
                terminal.say(f"target {row['target']}: {row['problem']}")
    if code:
        raise typer.Exit(code)


def _checked(target: Target, _say: fleet.Say) -> dict[str, Any]:
    """One target, checked: where the connection landed, its role, its table's state."""
    from jobctl import db
    from jobctl.db import session
    from jobctl.ops import slices, standby
    from jobctl.schema import unserved

    with session.open(target.settings) as s:
        st = standby.probe(s.conn)
        with db.safe(s.conn):
            missing = unserved.diagnose(s.conn, s.table)
        stuck = None
        if missing is None:
            with s.transaction(read_only=True):
                every = slices.EVERY.params()  # no --kind, --queue, --error
                leases = s.one("metrics_leases", {"soon": dt.timedelta(0), **every})
            stuck = leases["stuck_auto"] + leases["stuck_manual"]
    role = st.role if not st.standby else f"standby (lag {standby.seconds(st.lag_s)})"
    return {
        "reachable": True,
        "server": st.where,
        "role": role,
        "schema": "applied" if missing is None else "missing",
        "stuck": stuck,
        "problem": None if missing is None else " ".join(missing.message.split()),
    }
