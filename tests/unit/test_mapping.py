"""The table mapping: the design's names -> the table's, parsed and checked without a database."""

from __future__ import annotations

import pytest

from jobctl import errors
from jobctl.table import mapping
from jobctl.table.mapping import TableMapping

OWN_NAMES = mapping.TableMapping.parse(
    columns=["status=state", "reserved_by=locked_by", "available_at=scheduled_at"],
    statuses=["queued=pending", "processing=running", "done=completed"],
    park_status="manual_review",
)


def test_the_tables_own_names():
    assert OWN_NAMES.column("status") == "state"
    assert OWN_NAMES.column("attempt_token") == "attempt_token"
    assert OWN_NAMES.status("queued") == "pending" and OWN_NAMES.status("failed") == "failed"
    assert OWN_NAMES.parked == "manual_review"
    assert OWN_NAMES.written_statuses() == [
        "pending",
        "running",
        "completed",
        "failed",
        "manual_review",
    ]


def test_no_mapping_is_the_design():
    plain = mapping.TableMapping.parse()
    assert [plain.column(c) for c in mapping.COLUMNS] == list(mapping.COLUMNS)
    assert plain.parked == "failed" and plain.describe() == ["the lease design's own names"]


def test_json_round_trip():
    assert mapping.TableMapping.from_json(OWN_NAMES.to_json()) == OWN_NAMES


def test_unknown_design_names_are_keys_not_guesses():
    with pytest.raises(KeyError):
        OWN_NAMES.column("state")
    with pytest.raises(KeyError):
        OWN_NAMES.status("pending")


@pytest.mark.parametrize(
    ("columns", "statuses", "park", "message"),
    [
        (["status"], [], None, "give DESIGN=ACTUAL"),
        (["status="], [], None, "give DESIGN=ACTUAL"),
        (["state=status"], [], None, "'state' is not one of id, status"),
        ([], ["pending=queued"], None, "'pending' is not one of queued"),
        (["status=state", "status=phase"], [], None, "status given twice"),
        (["reserved_by=owner", "last_error=owner"], [], None, "would both be the column 'owner'"),
        (["status=id"], [], None, "would both be the column 'id'"),
        ([], ["queued=new", "failed=new"], None, "would both be the status value 'new'"),
        ([], [], "processing", "is the processing status"),
        ([], ["done=completed"], "completed", "is the done status"),
        ([], [], " ", "must not be empty"),
    ],
)
def test_ambiguous_mappings_are_refused(columns, statuses, park, message):
    with pytest.raises(errors.UsageError, match=message):
        mapping.TableMapping.parse(columns=columns, statuses=statuses, park_status=park)


def test_parking_in_failed_is_the_default_and_may_be_said():
    assert mapping.TableMapping.parse(park_status="failed").parked == "failed"
    assert mapping.TableMapping.parse(park_status="failed").written_statuses()[-1] == "failed"


def test_each_status_value_plays_its_part():
    m = TableMapping.parse(
        statuses=["queued=pending", "processing=running"], park_status="manual_review"
    )
    assert [m.role(v) for v in ("pending", "running", "done", "failed", "manual_review")] == [
        "queued",
        "processing",
        "done",
        "failed",
        "parked",
    ]
    assert m.role("queued") is None and m.role("archived") is None and m.role(None) is None


def test_a_row_keeps_the_designs_names_as_keys():
    from jobctl.ops.triage import design_names

    m = TableMapping.parse(columns=["status=state", "reserved_by=locked_by"])
    row = {"id": 1, "state": "running", "locked_by": "w1", "status": "legacy", "payload": {}}
    assert design_names(row, m) == {
        "id": 1,
        "status": "running",
        "reserved_by": "w1",
        "payload": {},
    }
    assert design_names(row, TableMapping()) == row


def test_a_partial_mapping_merges_into_the_recorded_one():
    """schema apply --column kind=class_name --column queue=queue_name on Kill Bill's mapped
    table adds the two, keeping id, status and the statuses; DESIGN=DESIGN puts one back."""
    recorded = TableMapping.parse(
        columns=["id=record_id", "status=processing_state", "attempts=error_count"],
        statuses=["queued=AVAILABLE", "processing=IN_PROCESSING"],
        park_status="REVIEW",
    )
    given = ["kind=class_name", "queue=queue_name"]
    merged = TableMapping.parse(columns=given).onto(recorded, mapping.Given.of(columns=given))
    assert merged.column("id") == "record_id" and merged.column("status") == "processing_state"
    assert merged.optional("kind") == "class_name" and merged.optional("queue") == "queue_name"
    assert merged.status("queued") == "AVAILABLE" and merged.park_status == "REVIEW"
    back = ["attempts=attempts", "status=state"]
    reset = TableMapping.parse(columns=back).onto(merged, mapping.Given.of(columns=back))
    assert reset.column("attempts") == "attempts" and reset.column("status") == "state"
    assert reset.optional("kind") == "class_name" and reset.column("id") == "record_id"
    assert not mapping.Given.of() and mapping.Given.of(park_status="x")
    # a merge that puts two parts on one column is refused, as a whole mapping would be
    clash = ["attempts=record_id"]
    with pytest.raises(errors.UsageError):
        TableMapping.parse(columns=clash).onto(recorded, mapping.Given.of(columns=clash))


def test_a_priority_and_its_order_round_trip():
    m = TableMapping.parse(columns=["priority=prio"], priority_order="desc")
    assert m.priority == "prio" and m.priority_order == "desc"
    assert TableMapping.from_json(m.to_json()) == m
    assert TableMapping.parse(columns=["priority=priority"]).priority == "priority"
    assert "priority_order" not in TableMapping.parse(columns=["priority=p"]).to_json()
    assert m.describe() == ["priority = prio (highest claimed first)"]
    # each part named replaces the recorded one; the rest are kept
    named = mapping.Given.of(priority_order="asc")
    back = TableMapping.parse(priority_order="asc").onto(m, named)
    assert back.priority == "prio" and back.priority_order == "asc"
    kept = TableMapping.parse(columns=["priority=rank"]).onto(
        m, mapping.Given.of(columns=["priority=rank"])
    )
    assert kept.priority == "rank" and kept.priority_order == "desc"


def test_a_priority_order_needs_a_priority_column():
    with pytest.raises(errors.UsageError, match="needs the table's priority column"):
        TableMapping.parse(priority_order="desc").onto(
            TableMapping(), mapping.Given.of(priority_order="desc")
        )
    with pytest.raises(errors.UsageError, match=r"asc .* or desc"):
        TableMapping.parse(columns=["priority=p"], priority_order="down")
    with pytest.raises(errors.UsageError, match="would both be the column 'attempts'"):
        TableMapping.parse(columns=["priority=attempts"])


def test_unlimited_max_attempts_round_trips_and_merges():
    import json

    Given = mapping.Given
    m = TableMapping.parse(unlimited_max_attempts="0")
    assert m.unlimited_max_attempts == 0
    assert TableMapping.from_json(m.to_json()) == m
    assert "unlimited_max_attempts" not in json.loads(TableMapping().to_json())
    named = Given.of(statuses=["queued=pending"])
    other = TableMapping.parse(statuses=["queued=pending"])
    assert other.onto(m, named).unlimited_max_attempts == 0  # kept when not named
    cleared = TableMapping.parse(unlimited_max_attempts="")
    assert cleared.onto(m, Given.of(unlimited_max_attempts="")).unlimited_max_attempts is None
    with pytest.raises(errors.UsageError, match="--unlimited-max-attempts 'x'"):
        TableMapping.parse(unlimited_max_attempts="x")
