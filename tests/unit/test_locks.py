"""The lock-retry schedule and loop, with a fake clock: no database, no sleeping."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobctl import errors
from jobctl.db import locks


class FakeTime:
    """A clock that the loop's sleeps and the tries advance."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def busy_until(fake: FakeTime, free_at: float, tries: list[float]):
    """A try that waits its whole lock_timeout while the lock is held, and succeeds after."""

    def attempt(timeout: float) -> str:
        tries.append(timeout)
        if fake.now + timeout < free_at:
            fake.now += timeout
            raise errors.LockTimeout("canceling statement due to lock timeout")
        fake.now = max(fake.now, free_at)
        return "done"

    return attempt


def test_the_schedule_grows_to_its_caps():
    backoff = locks.Backoff()
    timeouts = [backoff.lock_timeout(n) for n in range(20)]
    assert timeouts[0] == 0.05
    assert timeouts == sorted(timeouts) and max(timeouts) == 0.15  # the workers' worst wait
    assert timeouts[-1] == 0.15
    rng = random.Random(1)
    sleeps = [backoff.sleep(n, rng) for n in range(40)]
    assert all(0.05 <= s <= 1.5 for s in sleeps)
    assert max(sleeps[20:]) > 1.0 > min(sleeps[20:])  # late sleeps are jittered around 1 s


@given(st.integers(min_value=0, max_value=1000), st.integers(min_value=0, max_value=2**32))
def test_jitter_stays_within_its_bounds(attempt, seed):
    backoff = locks.Backoff()
    nominal = min(backoff.max_sleep, backoff.first_sleep * backoff.growth**attempt)
    pause = backoff.sleep(attempt, random.Random(seed))
    assert nominal * 0.5 <= pause <= nominal * 1.5
    assert 0 < backoff.lock_timeout(attempt) <= 0.15


def test_two_appliers_do_not_retry_in_step():
    backoff = locks.Backoff()
    first, second = random.Random(1), random.Random(2)
    assert [backoff.sleep(5, first) for _ in range(5)] != [
        backoff.sleep(5, second) for _ in range(5)
    ]


def test_it_gets_through_at_the_first_try_after_the_lock_is_free():
    fake, tries, retries = FakeTime(), [], []
    result = locks.with_lock_retries(
        busy_until(fake, 6.0, tries),
        deadline=300,
        on_retry=lambda n, elapsed, timeout: retries.append((n, elapsed, timeout)),
        clock=fake.clock,
        sleep=fake.sleep,
        rng=random.Random(0),
    )
    assert result == "done"
    assert len(tries) == len(retries) + 1
    assert [n for n, _, _ in retries] == list(range(1, len(retries) + 1))
    assert max(tries) <= 0.15
    # it waited no longer than one sleep plus one try past the moment the lock was free
    assert fake.now - 6.0 <= 1.5 + 0.15


def test_at_the_deadline_it_gives_up_without_a_try_past_it():
    fake, tries = FakeTime(), []
    with pytest.raises(locks.DeadlineExceeded) as raised:
        locks.with_lock_retries(
            busy_until(fake, 1e9, tries),
            deadline=10,
            clock=fake.clock,
            sleep=fake.sleep,
            rng=random.Random(0),
        )
    assert raised.value.exit_code == errors.EXIT_ERROR
    assert fake.now <= 10
    assert sum(tries) + sum(fake.slept) == pytest.approx(fake.now)
    assert len(tries) > 10


def test_a_short_deadline_shortens_the_last_try():
    fake, tries = FakeTime(), []
    with pytest.raises(locks.DeadlineExceeded):
        locks.with_lock_retries(
            busy_until(fake, 1e9, tries), deadline=0.03, clock=fake.clock, sleep=fake.sleep
        )
    assert tries == [pytest.approx(0.03)]


def test_other_errors_are_not_retried():
    def attempt(timeout: float) -> None:
        raise errors.DatabaseError("permission denied")

    with pytest.raises(errors.DatabaseError):
        locks.with_lock_retries(attempt, deadline=10, sleep=lambda s: None)


def test_throttle_lets_one_report_through_a_second():
    now = [0.0]
    throttle = locks.Throttle(1.0, clock=lambda: now[0])
    passed = []
    for tick in range(50):
        now[0] = tick * 0.1
        passed.append(throttle.ready())
    assert sum(passed) == 5 and passed[0]


def test_a_wait_in_one_line():
    wait = locks.Wait("add the lease columns", 3.04, 9, "pid 42 (active, ...: SELECT 1)")
    assert wait.describe() == (
        "waiting 3.0s: add the lease columns: lock held by pid 42 (active, ...: SELECT 1); 9 tries"
    )
    build = locks.Wait("create the index", 2, 0, None, "waiting for old snapshots")
    assert build.describe() == (
        "waiting 2.0s: create the index (waiting for old snapshots): held up by "
        "a session that has finished since"
    )
