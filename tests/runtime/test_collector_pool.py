"""CollectorPool's hang timer on a fake clock: it counts only the time the trainer ran."""

from __future__ import annotations

import pytest

from mbpo.runtime.supervisor import CollectorFailure, CollectorPool
from mbpo.runtime.timing import SUPERVISE_EVERY_S

pytestmark = pytest.mark.timeout(30)

TIMEOUT_S = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SilentThread:
    """A live thread collector that beat once, at start, and never again (as if stuck, or stopped with its
    process).
    """

    killable = False
    error = None
    incarnation = 0

    def __init__(self, clock: Clock) -> None:
        self.clock, self.last_beat, self.closed = clock, 0.0, False

    def start(self) -> None:
        self.last_beat = self.clock()

    def is_alive(self) -> bool:
        return True

    def abandon(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


class Gate:
    def release(self, transitions: int) -> None:
        pass


def pool_on(clock: Clock, logs: list[str]) -> CollectorPool:
    pool = CollectorPool(1, lambda cid, inc: SilentThread(clock), Gate(), max_restarts=0,  # type: ignore[arg-type]
                         timeout_s=TIMEOUT_S, log=logs.append, clock=clock)
    pool.start()
    return pool


def checks_until(pool: CollectorPool, clock: Clock, end: float) -> None:
    """The learner's checks, every SUPERVISE_EVERY_S, up to ``end``."""
    while clock.now + SUPERVISE_EVERY_S <= end:
        clock.now += SUPERVISE_EVERY_S
        pool.check()


def test_a_trainer_stopped_longer_than_the_timeout_blames_no_collector() -> None:
    """SIGSTOP stops the collector threads with the trainer: after SIGCONT the first check comes before they
    could beat. Counting the stopped time ended a Hopper run ("all 1 collectors are hung") after a 20-minute
    SIGSTOP.
    """
    clock, logs = Clock(), []
    pool = pool_on(clock, logs)
    checks_until(pool, clock, 10.0)
    clock.now += 1177.6  # stopped
    pool.check()
    assert not pool.hung
    assert any("did not run for 1177.6 s" in line for line in logs)


def test_a_silent_collector_is_still_hung_after_the_timeout_of_time_the_trainer_ran() -> None:
    """Stops leave the timer, not reset it: 10 s before a stop, 49 s between two, then the check that passes 60."""
    clock, logs = Clock(), []
    pool = pool_on(clock, logs)
    checks_until(pool, clock, 10.0)
    for running_s in (49.0, 1.0):
        clock.now += 1177.5  # stopped; the first check comes as it goes on
        pool.check()
        checks_until(pool, clock, clock.now + running_s)
    assert not pool.hung  # 60 s of running: not more than the timeout yet
    with pytest.raises(CollectorFailure, match="all 1 collectors are hung"):
        checks_until(pool, clock, clock.now + SUPERVISE_EVERY_S)
    assert "no sign of progress for 60.5 s" in logs[-1]


def test_without_gaps_a_silent_collector_is_hung_after_the_timeout() -> None:
    clock, logs = Clock(), []
    pool = pool_on(clock, logs)
    checks_until(pool, clock, TIMEOUT_S)
    with pytest.raises(CollectorFailure, match="all 1 collectors are hung"):
        checks_until(pool, clock, TIMEOUT_S + 1.0)


class SilentProcess(SilentThread):
    """A silent collector that can be killed (a process or an actor): it is replaced, within the budget."""

    killable = True


def test_a_hung_collector_past_the_budget_names_the_settings_not_a_traceback() -> None:
    """A hang has no traceback: the error once said "its traceback is above", over nothing."""
    clock, logs = Clock(), []
    pool = CollectorPool(1, lambda cid, inc: SilentProcess(clock), Gate(), max_restarts=0,  # type: ignore[arg-type]
                         timeout_s=TIMEOUT_S, log=logs.append, clock=clock)
    pool.start()
    with pytest.raises(CollectorFailure) as info:
        checks_until(pool, clock, TIMEOUT_S + 1)
    assert str(info.value).endswith("terminated it; restart budget spent (0/0) (runtime.collector_timeout_s says when "
                                    "a collector is hung, runtime.max_restarts how many restarts a run has)")
    assert "traceback" not in str(info.value) and "Traceback" not in "".join(logs)
