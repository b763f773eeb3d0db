"""Reclaim's plan files (``--save-plan``, ``--plan``): their format and the columns each
row is fenced on, written and read through ``ops.plans`` (0600, atomic, checked where they
are applied). A plan's rows are applied by ``batches.commit_plan``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobctl.contract.shapes import ReclaimRow, Row
from jobctl.ops import plans

PLAN_FORMAT = "jobctl-reclaim-plan/1"
PLAN_COLUMNS = ("id", "attempt_token", "lease_expires_at", "action")  # what a row is fenced on


def save_plan(path: Path, location: dict[str, Any], rows: list[ReclaimRow]) -> None:
    """Write the reviewed rows and where they were reviewed (no password) to ``path``: 0600,
    atomically, never through a link (``plans.write_rows``)."""
    plans.write_rows(path, PLAN_FORMAT, location, rows)


def load_plan(path: Path, location: dict[str, Any]) -> list[Row]:
    """The reviewed rows of a plan; refused (exit 2) when made for another database or table,
    without its origin, malformed or writable by others (``plans.read_rows``)."""
    return plans.read_rows(
        path,
        PLAN_FORMAT,
        location,
        PLAN_COLUMNS,
        hint=" (a plan saved across targets applies across them: the same --target options)",
    )
