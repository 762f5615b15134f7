"""CollectorPool on a fake clock: its hang timer counts only the time the trainer ran; its restart budget counts a
shared cause (one process, by pid and start time) once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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
    budget_spent = True

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


class Failed(SilentThread):
    """A collector that failed as soon as it started, with ``error``."""

    def __init__(self, clock: Clock, incarnation: int, error: BaseException) -> None:
        super().__init__(clock)
        self.incarnation, self.error = incarnation, error

    def is_alive(self) -> bool:
        return False


def test_a_shared_cause_is_one_process_by_pid_and_start_time_not_by_pid_alone() -> None:
    """The fork server dies (pid 7): both collectors forked from it fail and cost one restart. A later server
    the kernel gave pid 7 again (pid wrap-around) is another process: its death costs a restart of its own.
    """
    from mbpo.runtime.backends.process import ForkServerGone

    clock, logs = Clock(), []
    gone = {(0, 0): ForkServerGone("ended with the server", 7, 100), (1, 0): ForkServerGone("ended", 7, 100),
            (0, 1): ForkServerGone("ended with the next server", 7, 250)}

    def make(cid: int, incarnation: int) -> SilentThread:
        error = gone.get((cid, incarnation))
        return SilentThread(clock) if error is None else Failed(clock, incarnation, error)

    pool = CollectorPool(2, make, Gate(), max_restarts=1, timeout_s=TIMEOUT_S,  # type: ignore[arg-type]
                         log=logs.append, clock=clock)
    pool.start()
    pool.check()  # collector 0 pays, 1 restarts free
    assert pool.restarts == 1 and "(not counted again: restart 1/1)" in logs[1]
    with pytest.raises(CollectorFailure, match=r"collector 0 failed; restart budget spent \(1/1\): .*ended with the "
                                               r"next server"):
        pool.check()  # 0's next incarnation, forked from the next server
    assert [f[:2] for f in pool.failures] == [(0, 0), (1, 0), (0, 1)] and pool.restarts == 1
    assert "[mbpo] collector 1 failed: the fork server (pid 7) is gone, as for an earlier restart" in logs[1]


def test_a_process_start_time_is_when_it_started() -> None:
    """``start_time`` is /proc's starttime (ticks after boot): a child started now started within a minute of
    now by the boot time, and a reaped one has none (its pid may be another process's by then).
    """
    from mbpo.runtime.proc_tree import start_time

    boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child_start = start_time(child.pid)  # running or a zombie until the wait below: its own either way
    child.wait()
    assert child_start is not None
    assert abs(boot + child_start / os.sysconf("SC_CLK_TCK") - time.time()) < 60.0
    assert start_time(child.pid) is None


def test_a_fork_server_is_gone_once_it_ended_and_without_proc_once_it_is_reaped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With /proc a zombie server is gone (it forks nothing), and so is one whose pid a process that started at
    another time has now; without /proc only a reaped one can be told gone.
    """
    from mbpo.runtime.backends import forkserver

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        started = forkserver.start_time(child.pid)
        assert started is not None
        assert not forkserver.server_gone(child.pid) and not forkserver.server_gone(child.pid, started)
        assert forkserver.server_gone(child.pid, started - 1)  # the server that had this pid before it
    finally:
        child.stdin.close()  # type: ignore[union-attr]
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it has ended, and is a zombie until reaped
    assert forkserver.server_gone(child.pid, started)
    monkeypatch.setattr(forkserver, "Path", lambda path: type("NoProc", (), {"is_dir": lambda self: False})())
    assert not forkserver.server_gone(child.pid)  # a zombie still answers signal 0
    child.wait()
    assert forkserver.server_gone(child.pid)


class Finished(SilentThread):
    """A collector that took its last batch and ended normally."""

    def is_alive(self) -> bool:
        return False


class BudgetLeft(Gate):
    budget_spent = False  # the hung collector's batch went back to it


@pytest.mark.parametrize("num_collectors", [2, 1])
@pytest.mark.parametrize("max_restarts", [1, 0])
def test_a_hung_thread_whose_budget_no_running_collector_will_take_is_replaced(
        max_restarts: int, num_collectors: int) -> None:
    """Collector 0 ended (the budget was reserved), then the last collector was found hung and gave its batch
    back: the run ended short of total_env_steps and called itself done (a run of one collector ended on "all 1
    collectors are hung" with restarts left). Until the next check replaces it the pool is not finished.
    """
    clock, logs, made = Clock(), [], []
    hung = num_collectors - 1

    def make(cid: int, incarnation: int) -> SilentThread:
        made.append((cid, incarnation))
        return SilentThread(clock) if cid == hung and incarnation == 0 else Finished(clock)

    pool = CollectorPool(num_collectors, make, BudgetLeft(), max_restarts=max_restarts,  # type: ignore[arg-type]
                         timeout_s=TIMEOUT_S, log=logs.append, clock=clock)
    pool.start()
    if max_restarts == 0:
        with pytest.raises(CollectorFailure, match=f"collector {hung} hung with env steps of the budget left that "
                                                   "no running collector will take; restart budget spent"):
            checks_until(pool, clock, TIMEOUT_S + 1)
        return
    pool.hung.add(hung)  # as a check finds it, before the one that replaces it
    assert not pool.finished
    pool.hung.clear()
    checks_until(pool, clock, TIMEOUT_S + 1)
    assert made[-1] == (hung, 1) and pool.restarts == 1 and not pool.hung
    assert pool.hung_now == 1  # the replaced thread is still stuck: the metric did not drop to 0
    pool.retired[0].is_alive = lambda: False  # type: ignore[method-assign]  # its step returned at last
    assert pool.hung_now == 0


def test_an_abandoned_thread_counts_as_hung_while_it_runs() -> None:
    clock, logs = Clock(), []
    pool = CollectorPool(2, lambda cid, inc: SilentThread(clock) if cid == 1 else Finished(clock),  # type: ignore
                         Gate(), max_restarts=0, timeout_s=TIMEOUT_S, log=logs.append, clock=clock)
    pool.start()
    checks_until(pool, clock, TIMEOUT_S + 1)
    assert pool.hung == {1} and pool.hung_now == 1
    pool.collectors[1].is_alive = lambda: False  # type: ignore[method-assign]  # closing its env ended its step
    assert pool.hung_now == 0

