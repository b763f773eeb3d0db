"""What each command shows: its result as a ``Document`` (the JSON payload, the contract,
and the same data as titled tables). Pure: no database, no printing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from jobctl import rows
from jobctl.output import Document, Section, key_values


def table(payload: Any, found: Iterable[Any], columns: Sequence[str] | None = None) -> Document:
    """One untitled table; ``payload`` is what JSON shows (often the same rows, streamed)."""
    return Document(payload, [Section(None, found, columns)])


def some_rows(shown: list[Any], total: int, columns: Sequence[str] | None = None) -> Document:
    """``shown`` of ``total`` rows, the table's title saying how many when it is not all of
    them (thousands of rows on a terminal help nobody; the rest are behind ``-o``)."""
    title = None
    if len(shown) < total:
        title = (
            f"{len(shown)} of {total} rows shown: the first ones and any skipped "
            "(every row: -o jsonl, -o json or -o csv)"
        )
    return Document(shown, [Section(title, shown, columns)])


def stuck(found: list[Any], columns: list[str]) -> Document:
    """Stuck rows; a ``skipped`` column only when some row is locked by another session."""
    shown = columns + (["skipped"] if any(r["skipped"] for r in found) else [])
    return table(found, found, shown)


def summary(result: rows.Row) -> Document:
    by_status = [
        {
            "status": status,
            "jobs": n,
            "counted": "estimate" if status in result["estimated"] else "exact",
        }
        for status, n in result["status"].items()
    ]
    return Document(
        result,
        [
            Section("jobs by status", by_status),
            Section("processing by lease", [result["processing"]]),
            Section("workers (most expired first)", result["workers"], rows.SUMMARY_WORKER_COLUMNS),
        ],
    )


def show(job: rows.Row, job_id: object) -> Document:
    """The job's fields as a two-column table, then its latest events."""
    fields = {k: v for k, v in job.items() if k != "events"}
    return Document(
        job,
        [
            Section(f"job {job_id}", key_values(fields)),
            Section("latest events", job["events"], rows.EVENT_COLUMNS),
        ],
    )


def history(result: rows.History, job_id: object) -> Document:
    head = {k: result["job"].get(k) for k in rows.HISTORY_HEAD_COLUMNS}
    return Document(
        result,
        [
            Section(f"job {job_id}", [head]),
            Section("attempts", result["attempts"], rows.ATTEMPT_COLUMNS),
            Section("events", result["events"], rows.EVENT_COLUMNS),
        ],
    )


def explain(result: rows.Row) -> Document:
    return table(result, [{"story": line} for line in result["story"]])
