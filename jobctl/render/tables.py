"""Each command's ``-o csv``/``tsv`` as one table a CSV reader takes whole (csvkit, mlr,
Python's csv), where its JSON is not a list of rows: ``show`` (the job as one row),
``history`` (a row per attempt or event, the job's columns after), ``report`` (a row per
part, ``section`` first). Each header is fixed by the command, its options and the table,
never by the rows (``output.Section.keys``). Pure: no database, no printing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobctl.contract import shapes
from jobctl.render import pause_views, rows
from jobctl.render.output import Document, Section


def show_table(job: shapes.Row) -> Document:
    """``show -o csv/tsv``: the job as one row, every field JSON gives it but its latest
    events (the job's columns, fixed by its table, and jobctl's judgements of it); its
    events as one table: ``history ID --events -o csv``. JSON is unchanged: the whole job."""
    fields = {k: v for k, v in job.items() if k != "events"}
    return Document(job, [Section(None, [fields], keys=list(fields))])


def history_table(result: shapes.History, *, events: bool = False) -> Document:
    """``history -o csv/tsv``: one table a CSV reader takes whole (csvkit, mlr, Python's
    csv): a row per attempt (``events``: per event), with every key JSON gives that row
    (the shape's keys: the same header with no row), then every column of the job's row as
    ``job_NAME``, ``job_id`` first. JSON is unchanged: the whole ``result``."""
    found: list[Mapping[str, Any]] = list(result["events"] if events else result["attempts"])
    own = rows.EVENT_KEYS if events else rows.ATTEMPT_KEYS  # the shape's, whatever the rows
    job = {f"job_{k}": v for k, v in result["job"].items()}
    columns = ["job_id", *own, *(k for k in job if k != "job_id")]
    table = [{**job, **row} for row in found]
    return Document(result, [Section(None, table, columns)])


def report_table(result: Mapping[str, Any]) -> Document:
    """``report -o csv/tsv``: the report's data as one table, ``section`` first: a row of
    the plain values of the top level (``report``: the table, the window, the counts) and
    of each object in it (``latency``, ``expired_totals``, ``awaiting_review`` ...), and a
    row per row of each list of rows (``expired``, ``awaiting_review.oldest`` ...: the JSON
    path to it). Its header is ``report_keys()``: every key the report's shapes declare,
    whatever the incident held (empty where a section has none); a deeper object or a list
    of values is one JSON cell. JSON is unchanged: the whole ``result``."""
    table: list[dict[str, Any]] = []
    _report_rows("report", result, table)
    return Document(result, [Section(None, table, keys=report_keys())])


# the lists of rows a report's shapes leave untyped (shapes.Row), by their JSON path
REPORT_UNTYPED_ROWS = {
    "pauses.now": pause_views.PAUSE_KEYS,
    "pauses.events": pause_views.PAUSE_EVENT_KEYS,
}


def report_keys() -> list[str]:
    """``report -o csv/tsv``'s header: ``section``, then the keys ``_report_rows`` gives a
    row, read from ``shapes.IncidentReport`` and the shapes in it (not from the rows), in
    the order they first come."""
    keys = dict.fromkeys(["section"])
    _shape_keys("report", shapes.IncidentReport, keys)
    return list(keys)


def _shape_keys(path: str, shape: type, keys: dict[str, None]) -> None:
    """``_report_rows``'s walk over a shape's declared types instead of a report's values."""
    import typing

    top = path == "report"
    hints = typing.get_type_hints(shape)
    nested = {k: t for k, t in hints.items() if _row_type(t) or (top and typing.is_typeddict(t))}
    keys.update(dict.fromkeys(k for k in hints if k not in nested))
    for key, kind in nested.items():
        where = key if top else f"{path}.{key}"
        row = _row_type(kind)
        if row is None:
            _shape_keys(where, kind, keys)
        elif typing.is_typeddict(row):
            keys.update(dict.fromkeys(rows.keys(row)))
        else:
            keys.update(dict.fromkeys(REPORT_UNTYPED_ROWS[where]))


def _row_type(kind: Any) -> Any:
    """The row type of a list of rows (``list[ExpiredGroup]``, ``list[Row]``), else None."""
    import typing

    if typing.get_origin(kind) is not list:
        return None
    (item,) = typing.get_args(kind)
    if typing.is_typeddict(item) or typing.get_origin(item) is dict:
        return item
    return None


def _report_rows(path: str, value: Mapping[str, Any], table: list[dict[str, Any]]) -> None:
    top = path == "report"
    nested = {k: v for k, v in value.items() if _rows(v) or (top and isinstance(v, Mapping))}
    plain = {k: v for k, v in value.items() if k not in nested}
    if plain:
        table.append({"section": path, **plain})
    for key, inner in nested.items():
        where = key if top else f"{path}.{key}"
        if isinstance(inner, Mapping):
            _report_rows(where, inner, table)
        else:
            table.extend({"section": where, **row} for row in inner)


def _rows(value: Any) -> bool:
    """A list of rows (objects); an empty list is one too (it adds none)."""
    return isinstance(value, list) and all(isinstance(r, Mapping) for r in value)
