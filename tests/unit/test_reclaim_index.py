"""The reclaim index's names (within 63 bytes, distinct per partition) and what schema check
says of a partition's index, without a database."""

from __future__ import annotations

import pytest

from jobctl.schema import reclaim_index

SUFFIX = "_processing_timeout"


def test_a_short_name_is_the_lease_designs():
    assert reclaim_index.index_name("jobs", SUFFIX) == "idx_jobs_processing_timeout"
    assert reclaim_index.index_name("jobs", SUFFIX, distinct=True) == "idx_jobs_processing_timeout"


def test_a_long_name_is_cut_to_63_bytes_and_keeps_its_suffix():
    name = reclaim_index.index_name("j" * 80, SUFFIX)
    assert len(name.encode()) == 63 and name.endswith(SUFFIX)


def test_partitions_differing_past_the_cut_get_distinct_names():
    stem = "jobs_partition_for_the_queue_with_a_rather_long_name_number_"
    first = reclaim_index.index_name(stem + "1", SUFFIX, distinct=True)
    second = reclaim_index.index_name(stem + "2", SUFFIX, distinct=True)
    assert first != second
    assert len(first.encode()) <= 63 and len(second.encode()) <= 63
    assert first.endswith(SUFFIX) and second.endswith(SUFFIX)
    # the same partition always gets the same name: a re-run finds what an earlier one built
    assert reclaim_index.index_name(stem + "1", SUFFIX, distinct=True) == first


@pytest.mark.parametrize("relname", ["jobs_ünïcödé_" * 5, "ジョブ" * 15, "jobs_€" * 12])
def test_a_multibyte_name_is_never_cut_inside_a_character(relname):
    for distinct in (False, True):
        name = reclaim_index.index_name(relname, SUFFIX, distinct=distinct)
        assert len(name.encode()) <= 63 and name.endswith(SUFFIX)
        assert name.encode().decode() == name  # valid UTF-8 throughout


def partition(
    *, relkind: str = "r", index: str | None = None, valid: bool = False, unattached=None
) -> reclaim_index.Partition:
    return reclaim_index.Partition(
        oid=2,
        parent_oid=1,
        schema="public",
        name="jobs_mail",
        qualified="public.jobs_mail",
        relkind=relkind,
        index=index,
        index_valid=valid,
        unattached=unattached or {},
    )


@pytest.mark.parametrize(
    ("made", "state"),
    [
        (partition(index="i", valid=True), "attached"),
        (partition(index="i", valid=False), "invalid"),  # attached, yet invalid
        (partition(relkind="p", index="i", valid=False), "attached"),  # its own still coming
        (partition(unattached={"i": True}), "not attached"),
        (partition(unattached={"i": False}), "invalid"),  # an interrupted build's leftover
        (partition(unattached={"i": False, "j": True}), "not attached"),
        (partition(), "missing"),
    ],
)
def test_what_check_says_of_a_partitions_index(made, state):
    assert made.state() == state
