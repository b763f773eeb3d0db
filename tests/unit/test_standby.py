"""A standby's standing, its lag and what follows from it, with no database."""

from __future__ import annotations

import datetime as dt

from jobctl.cli import context
from jobctl.ops import standby
from jobctl.ops.triage import ExpiredFilter
from jobctl.render import output

STANDBY = {"standby": True, "paused": False, "replay_age_s": 9.5, "caught_up": False}


def standing(**row: object) -> standby.Standing:
    return standby.standing("10.0.0.2", "5433", {**STANDBY, "receiver": "streaming", **row})


def test_a_primary_has_no_lag_and_no_notice():
    st = standby.standing("db", "5432", {"standby": False})
    assert not st.standby and st.margin == dt.timedelta(0)
    assert standby.notice(st, widened=True) is None
    assert standby.figures(st) == {"replica_lag_s": 0.0, "standby": 0}
    where = ExpiredFilter()
    assert standby.widen(where, st, trust=False) is where


def test_the_lag_is_the_replay_age_unless_replay_caught_up_with_a_streaming_primary():
    assert standing().lag_s == 9.5
    assert standing(caught_up=True).lag_s == 0.0
    assert standing(caught_up=True, receiver="hidden").lag_s == 0.0  # no pg_read_all_stats
    assert standing(caught_up=True, paused=True).lag_s == 9.5  # paused: behind, whatever it got
    assert standing(caught_up=True, receiver=None).lag_s == 9.5  # not streaming: stale
    assert standing(replay_age_s=None).lag_s is None


def test_the_notice_says_the_lag_and_what_it_means_for_leases():
    line = standby.notice(standing(paused=True), widened=True)
    assert line is not None and "\n" not in line
    assert line.startswith("jobctl: reading standby 10.0.0.2:5433 (replay paused, 9.5s behind)")
    assert "leases that expire within 9.5s of now may have been extended on the primary" in line
    assert "--trust-replica" in line
    assert "--trust-replica" not in (standby.notice(standing(), widened=False) or "")
    assert "caught up" in (standby.notice(standing(caught_up=True), widened=True) or "")
    assert "not streaming" in (standby.notice(standing(receiver=None), widened=True) or "")
    assert "a guess" in (standby.notice(standing(replay_age_s=None), widened=True) or "")


def test_widening_adds_the_lag_to_the_grace_unless_trusted():
    where = ExpiredFilter(grace=dt.timedelta(seconds=1))
    assert standby.widen(where, standing(), trust=False).grace == dt.timedelta(seconds=10.5)
    assert standby.widen(where, standing(), trust=True) is where
    assert standby.widen(where, standing(caught_up=True), trust=False) is where
    assert standby.widen(where, None, trust=False) is where


def test_which_commands_write():
    assert context.access("requeue", {}).writes
    assert context.access("reclaim", {"commit": True}).writes
    assert not context.access("reclaim", {"commit": False}).writes
    assert not context.access("quarantine", {"commit": False}).writes
    assert not context.access("stuck", {"commit": True}).writes
    assert context.access("stuck", {}).widened and context.access("reclaim", {}).widened
    assert not context.access("stuck", {"trust_replica": True}).widened
    assert not context.access("summary", {}).widened
    line = standby.refusal(standing(), "requeue")
    assert "10.0.0.2:5433 is a standby" in line and "target_session_attrs=read-write" in line


def test_json_carries_the_replica_field_only_on_a_standby():
    rows = [{"id": 1}]
    doc = output.Document(rows, [])
    assert standby.mark(doc, standby.standing("db", "5432", {"standby": False})) is doc
    marked = standby.mark(doc, standing())
    assert marked.payload == [{"id": 1, "replica": standing().info()}]
    one = standby.mark(output.Document({"a": 1}, []), standing())
    assert one.payload["replica"]["lag_s"] == 9.5
    streamed = standby.mark(output.Document(iter(rows), []), standing()).payload
    assert list(streamed) == [{"id": 1, "replica": standing().info()}]
