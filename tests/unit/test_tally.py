"""reclaim's counting (jobctl/ops/reclaim/tally.py): the counts of every batch, and the rows
a table shows (the first ones, then the skipped ones), on one target and across targets."""

from __future__ import annotations

from jobctl.ops.reclaim.tally import Tally


def test_the_table_keeps_the_first_rows_and_the_skipped_ones():
    from jobctl.cli import terminal
    from jobctl.render import views

    first = terminal.TABLE_ROWS

    def batches(skipped: set[int], size: int, count: int) -> list[list[dict]]:
        rows = [
            {"id": i, "action": "requeue", "skipped": "locked" if i in skipped else None}
            for i in range(count)
        ]
        return [rows[i : i + size] for i in range(0, count, size)]

    def drained(skipped: set[int], size: int = 7, count: int = 100) -> list[int]:
        tally = Tally(shown=first)
        for _ in tally.counted(batches(skipped, size, count)):  # type: ignore[arg-type]
            pass
        assert tally.total == count
        assert tally.counts["skipped"] == len(skipped & set(range(count)))
        return [r["id"] for r in tally.kept]

    assert drained(set()) == list(range(first))
    assert drained({3, first + 5, 99}) == [*range(first), first + 5, 99]
    many = set(range(50, 100))  # more skipped rows than the table shows: the first of them
    assert drained(many) == [*range(first), *range(50, 50 + first)]
    assert drained(set(), count=5) == list(range(5))
    doc = views.some_rows([{"id": 1}], 30)
    assert doc.sections[0].title.startswith("1 of 30 rows shown")
    assert "-o jsonl" in doc.sections[0].title
    assert views.some_rows([{"id": 1}], 1).sections[0].title is None


def test_a_tally_across_targets_keeps_each_targets_first_rows_under_its_name():
    """A dry run across targets: each target's table rows (its first ones, then its skipped
    ones), target after target, and the counts of all."""

    def found(count: int, skipped: set[int]) -> list[dict]:
        return [
            {"id": i, "action": "fail" if i % 3 else "requeue", "skipped": None}
            | ({"skipped": "locked"} if i in skipped else {})
            for i in range(count)
        ]

    a = Tally.of(found(30, {25}), shown=20)  # type: ignore[arg-type]
    b = Tally.of(found(3, set()), shown=20)  # type: ignore[arg-type]
    joined = Tally.across({"a": a, "b": b})
    assert [(r["target"], r["id"]) for r in joined.kept] == [
        *(("a", i) for i in [*range(20), 25]),
        *(("b", i) for i in range(3)),
    ]
    assert joined.total == 33 and joined.counts == a.counts + b.counts
    assert a.counts == {"requeue": 10, "fail": 19, "skipped": 1}


def written(action: str = "requeue", **what: object) -> dict:
    """A row as the reclaim statement returns it: what it read, and what it wrote."""
    return {
        "id": 7,
        "action": action,
        "skipped": None,
        "written_row": True,
        "written_status": "queued" if action == "requeue" else "failed",
        "written_token_cleared": True,
        "written_reclaim_count": 1,
        "read_reclaim_count": 0,
    } | what


def test_a_row_written_as_meant_is_applied_and_what_it_wrote_is_not_shown():
    from jobctl.ops.reclaim import tally
    from jobctl.table.mapping import TableMapping

    row = tally.as_written(written(), TableMapping())
    assert row == {"id": 7, "action": "requeue", "skipped": None, "applied": True}
    parked = TableMapping(park_status="errored")
    assert tally.as_written(written("fail", written_status="errored"), parked)["applied"]
    mapped = TableMapping(statuses={"queued": "pending"})
    assert tally.as_written(written(written_status="pending"), mapped)["applied"]


def test_a_row_a_later_trigger_kept_back_or_changed_back_is_skipped_saying_so():
    from jobctl.ops.reclaim import row_errors, tally
    from jobctl.table.mapping import TableMapping

    kept = tally.as_written(written(written_row=False, written_status=None), TableMapping())
    assert not kept["applied"] and kept["skipped"].startswith(
        "error: an application trigger kept it back"
    )
    assert row_errors.raised(kept)  # named on the partial line, passed over by the service
    back = written(written_status="processing", written_token_cleared=False)
    changed = tally.as_written(back, TableMapping())
    assert not changed["applied"]
    assert changed["skipped"] == (
        "error: an application trigger changed it (status still processing, "
        "attempt token not cleared)"
    )
    other = tally.as_written(
        written(written_status="done", written_reclaim_count=0), TableMapping()
    )
    assert other["skipped"].endswith("(status done, not queued, reclaim_count 0, not 1)")
    assert Tally.of([kept, changed, other]).counts == {"skipped": 3}
