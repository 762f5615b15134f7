"""Supervision: collector restarts and hang detection, worker errors, and stop signals.

The main thread calls :meth:`CollectorPool.check` every few tens of
milliseconds, so an exception in any collector (or a collector process that
exits or is killed) reaches it well within 2 s, with the original traceback.
A failed collector is restarted (fresh env, the newest published weights)
while the restart budget lasts; after that the run stops cleanly and raises
:class:`CollectorFailure`. A collector with no sign of progress for
``collector_timeout_s`` is hung: a process is terminated and replaced; a
thread, which cannot be killed, is abandoned (its env is closed, which
releases a simulator stuck in ``step``) and the run goes on with the rest.
That time counts only while the trainer itself runs: a trainer stopped
(SIGSTOP, a debugger) stopped its collector threads too, so a gap between
two checks longer than ``UNOBSERVED_S`` is no collector's silence.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from types import FrameType
from typing import Any

from mbpo.errors import MbpoError, RunFailedError
from mbpo.runtime.collectors import Collector
from mbpo.runtime.gate import RatioGate
from mbpo.runtime.timing import UNOBSERVED_S

__all__ = ["CollectorPool", "CollectorFailure", "WorkerError", "StopOnSignals", "format_error", "cause_line"]


class CollectorFailure(RunFailedError):
    """A collector failed and the restart budget is spent (or every collector hung). The collector's own
    traceback is logged before it is raised, and is its ``__cause__``.
    """


class WorkerError(RuntimeError):
    """A non-collector worker (the model thread) failed; the original exception is the cause."""


def format_error(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


def cause_line(exc: BaseException) -> str:
    """The last line of ``exc``'s traceback (``ValueError: ...``), for the message of the error that wraps it,
    so the wrapper's own last line still names the cause; of a message of several lines (a collector process's
    error carries the child's traceback) only its first, the headline.
    """
    return traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[0]


class CollectorPool:
    """Starts ``num_collectors`` collectors and keeps them running (or says why it cannot)."""

    def __init__(
        self,
        num_collectors: int,
        make_collector: Callable[[int, int], Collector],
        gate: RatioGate,
        max_restarts: int,
        timeout_s: float,
        log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.make_collector, self.gate = make_collector, gate
        self.max_restarts, self.timeout_s, self.log, self.clock = max_restarts, timeout_s, log, clock
        self._checked_at = clock()
        self._gaps: list[tuple[float, float]] = []
        """(start, end) of the gaps between checks longer than UNOBSERVED_S: time no collector is blamed for."""
        self.collectors: dict[int, Collector] = {i: make_collector(i, 0) for i in range(num_collectors)}
        self.restarts = 0
        self._paid: set[Hashable] = set()
        """Shared causes of failure a restart has already been counted for, by ``shared_cause_key`` (else by
        ``shared_cause``, the cause's words)."""
        self.hung: set[int] = set()
        """Collectors abandoned as hung (threads, which cannot be killed) and not yet replaced."""
        self._replaced_hung: list[Collector] = []
        """Hung threads a new thread replaced: still hung while they run."""
        self.retired: list[Collector] = []
        """Failed or hung incarnations (joined at close)."""
        self.failures: list[tuple[int, int, float, float, str]] = []
        """Per failure or hang: (collector_id, incarnation, time.monotonic() when detected, its last sign of
        progress then, what happened)."""

    def start(self) -> None:
        self._checked_at = self.clock()
        for c in self.collectors.values():
            c.start()

    @property
    def finished(self) -> bool:
        """Every live collector ran out of budget and exited normally, and no hung one gave back budget that is
        still to collect (the next :meth:`check` replaces it).
        """
        if self.hung and not self.gate.budget_spent:
            return False
        return self._live_ended()

    def _live_ended(self) -> bool:
        return all(not c.is_alive() and c.error is None for i, c in self.collectors.items() if i not in self.hung)

    def check(self) -> None:
        """Restart failed collectors, deal with hung ones; raise CollectorFailure when the run cannot go on.

        A hung collector that can be killed (a process) is terminated and replaced like a failed one; a
        thread cannot be killed, so it is abandoned (its env closed) and the run goes on with the rest, or, once
        the rest have ended with budget left (the hung one's), with a new thread in its place (a restart).
        """
        now = self._observe()
        for cid, c in list(self.collectors.items()):
            if cid in self.hung:
                continue
            if c.error is not None:
                self._failed(cid, c)
            elif c.is_alive() and (quiet_s := self._quiet_s(c.last_beat, now)) > self.timeout_s:
                self.gate.release(c.abandon())
                c.close()
                self.retired.append(c)
                quiet = (f"no sign of progress for {quiet_s:.1f} s "
                         f"(runtime.collector_timeout_s={self.timeout_s})")
                if c.killable:
                    self._replace(cid, c, f"collector {cid} is hung: {quiet}; terminated it", None)
                else:
                    self.hung.add(cid)
                    self.log(f"[mbpo] collector {cid} is hung: {quiet}; going on with the rest")
        if self.hung and self._live_ended() and not self.gate.budget_spent:
            # the hung one's batch went back to the gate, and no collector is left running to take it (the only
            # one hung, or the others ended): without a new thread the run would end short of total_env_steps
            cid = min(self.hung)
            self.hung.discard(cid)
            self._replaced_hung.append(self.collectors[cid])
            self._replace(cid, self.collectors[cid], f"collector {cid} hung with env steps of the budget left that "
                          "no running collector will take", None)
        if len(self.hung) == len(self.collectors):
            raise CollectorFailure(f"all {len(self.collectors)} collectors are hung; no data can arrive")

    @property
    def hung_now(self) -> int:
        """Collectors hung at this moment: the threads abandoned as hung that still run, replaced or not (a thread
        that cannot be killed stays hung after a new one took its place; one whose step returned has ended).
        """
        return sum(self.collectors[cid].is_alive() for cid in self.hung) + sum(
            c.is_alive() for c in self._replaced_hung)

    def _observe(self) -> float:
        """The time of this check; a gap since the last one longer than UNOBSERVED_S is set aside (and said, when
        it is longer than the timeout itself): the trainer did not run, so neither did its collector threads.
        """
        now = self.clock()
        if now - self._checked_at > UNOBSERVED_S:
            self._gaps.append((self._checked_at, now))
            if now - self._checked_at > self.timeout_s:
                self.log(f"[mbpo] the trainer did not run for {now - self._checked_at:.1f} s (stopped, or in one long "
                         "call); the collectors' hang timers leave that time out")
        self._checked_at = now
        oldest = min((c.last_beat for cid, c in self.collectors.items() if cid not in self.hung), default=now)
        self._gaps = [g for g in self._gaps if g[1] > oldest]  # a gap before every collector's last beat is spent
        return now

    def _quiet_s(self, last_beat: float, now: float) -> float:
        """Seconds since ``last_beat`` that the trainer ran (the gaps set aside left out)."""
        unobserved = sum(max(0.0, end - max(start, last_beat)) for start, end in self._gaps)
        return now - last_beat - unobserved

    def _failed(self, cid: int, c: Collector) -> None:
        error = c.error
        assert error is not None
        c.close()
        self.retired.append(c)
        if isinstance(error, MbpoError):  # the user's to fix (an env fault, a factory): a restart meets it again
            raise error
        self._replace(cid, c, f"collector {cid} failed", error)

    def _replace(self, cid: int, c: Collector, what: str, error: BaseException | None) -> None:
        """Start the next incarnation from the newest weights while the restart budget lasts. Collectors that
        failed of one cause (an error's ``shared_cause``: the fork server they were forked from died) cost the
        budget one restart: the first pays, the rest restart free.
        """
        self.failures.append((cid, c.incarnation, self.clock(), c.last_beat, what))
        shared = getattr(error, "shared_cause", None)
        key = getattr(error, "shared_cause_key", shared)
        if shared is not None and key in self._paid:
            self.log(f"[mbpo] {what}: {shared}, as for an earlier restart; restarting it from the newest weights "
                     f"(not counted again: restart {self.restarts}/{self.max_restarts})")
            self._start_next(cid, c)
            return
        detail = f":\n{format_error(error)}" if error is not None else ""
        if self.restarts >= self.max_restarts:
            spent = f"restart budget spent ({self.restarts}/{self.max_restarts})"
            self.log(f"[mbpo] {what}; {spent}, so the run stops{detail}")
            why = (f": {cause_line(error)}; its traceback is above (runtime.max_restarts sets the budget)"
                   if error is not None else " (runtime.collector_timeout_s says when a collector is hung, "
                   "runtime.max_restarts how many restarts a run has)")
            raise CollectorFailure(f"{what}; {spent}{why}") from error
        self.restarts += 1
        if shared is not None:
            self._paid.add(key)
        self.log(f"[mbpo] {what}; restarting it from the newest weights (restart {self.restarts}/"
                 f"{self.max_restarts}){detail}")
        self._start_next(cid, c)

    def _start_next(self, cid: int, c: Collector) -> None:
        replacement = self.make_collector(cid, c.incarnation + 1)
        self.collectors[cid] = replacement
        replacement.start()

    def stop(self) -> None:
        for c in [*self.collectors.values(), *self.retired]:
            c.stop()

    def join(self, deadline: float) -> list[str]:
        """Join every collector thread by ``deadline`` (time.monotonic()); names of the ones still alive."""
        late = []
        for c in [*self.collectors.values(), *self.retired]:
            if not c.join(max(deadline - time.monotonic(), 0.0)):
                late.append(f"collector {c.collector_id}.{c.incarnation}")
        return late

    def close(self) -> None:
        for c in [*self.collectors.values(), *self.retired]:
            c.close()


class StopOnSignals:
    """Within the block, SIGINT and SIGTERM set ``stop`` (and remember which) instead of killing the process.

    ``doing()`` says, when the signal comes, what stopping will do (a trainer knows whether it has anything to
    checkpoint yet). Blocks nest: one entered after an outer block has caught a signal (Ctrl-C during a
    trainer's start-up, caught by the command line's block) starts stopped, with that signal. Python only lets
    the main thread install handlers; elsewhere this is a no-op.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stop: threading.Event, doing: Callable[[], str] | None = None) -> None:
        self.stop = stop
        self.signum: int | None = None
        self.doing = doing or (lambda: "draining the queue, joining threads, writing a final checkpoint")
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            print(f"\n[mbpo] {signal.Signals(signum).name}: stopping ({self.doing()})", file=sys.stderr)
        self.stop.set()

    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            outer = getattr(self._previous[signal.SIGINT], "__self__", None)
            if isinstance(outer, StopOnSignals) and outer.signum is not None:
                self.signum = outer.signum
                self.stop.set()
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
