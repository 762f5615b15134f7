"""The rate columns of ``metrics.csv``: over the last logging interval, and over the whole run.

A run's start (building envs, spawning collector processes, the first model fit) is slow, so a
rate averaged from step 0 understates what the run does once it is going. ``env_steps_per_s`` and
``updates_per_s`` are therefore the rates since the previous row; the first row after a start or a
resume is measured from that (re)start, never from step 0. The whole-run averages stay beside them
as ``env_steps_per_s_whole_run`` and ``updates_per_s_whole_run``: ``env_steps / wall_s`` and
``updates / wall_s`` of the same row, ``wall_s`` summing the run's seconds across resumes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Throughput", "RATE_COLUMNS", "steady_rate", "interval_rates"]

RATE_COLUMNS = ("env_steps_per_s", "updates_per_s", "env_steps_per_s_whole_run", "updates_per_s_whole_run")
"""The rate columns a trainer's row carries (also: what a determinism check leaves out, with ``wall_s``)."""
_TINY_S = 1e-9  # a zero-length interval gives a finite (huge) rate, never a ZeroDivisionError


class Throughput:
    """A run's wall-clock and its rates, from one (re)start: ``row()`` closes a logging interval.

    ``clock`` is any monotonic seconds counter (``time.perf_counter``; tests pass a fake one).
    """

    def __init__(self, env_steps: int, updates: int, wall_s: float = 0.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        """``env_steps``, ``updates`` and ``wall_s`` are the run's counters at this (re)start (a checkpoint's)."""
        self.clock = clock
        self._start = clock()
        self._wall_before = wall_s
        self._mark = (self._start, env_steps, updates)
        self._last_rates = {"env_steps_per_s": 0.0, "updates_per_s": 0.0}
        self.interval_s = 0.0
        """Seconds of the interval the last :meth:`row` closed (a window for other per-interval columns)."""

    def wall_s(self, now: float | None = None) -> float:
        """The run's wall-clock seconds: those before this (re)start plus those since."""
        return self._wall_before + (self.clock() if now is None else now) - self._start

    def since_row(self) -> float:
        """Seconds of the interval in progress."""
        return self.clock() - self._mark[0]

    def live(self, env_steps: int, updates: int) -> dict[str, float]:
        """Rates of the interval in progress (the progress bar's figures; they become the next row's), or the
        last row's while the interval has counted nothing yet (a bar updated just after a row, or the finished
        one, would otherwise read as idle).
        """
        if (env_steps, updates) == self._mark[1:]:
            return dict(self._last_rates)
        seconds = max(self.since_row(), _TINY_S)
        return {"env_steps_per_s": (env_steps - self._mark[1]) / seconds,
                "updates_per_s": (updates - self._mark[2]) / seconds}

    def row(self, env_steps: int, updates: int, now: float | None = None) -> dict[str, float]:
        """``wall_s`` and the four rate columns of a metrics row now (or at the clock's ``now``); the next interval
        starts there.
        """
        now = self.clock() if now is None else now
        wall = self.wall_s(now)
        since, steps_before, updates_before = self._mark
        self.interval_s = now - since
        seconds, whole = max(self.interval_s, _TINY_S), max(wall, _TINY_S)
        self._mark = (now, env_steps, updates)
        self._last_rates = {"env_steps_per_s": (env_steps - steps_before) / seconds,
                            "updates_per_s": (updates - updates_before) / seconds}
        return {"wall_s": wall, **self._last_rates,
                "env_steps_per_s_whole_run": env_steps / whole,
                "updates_per_s_whole_run": updates / whole}


def steady_rate(rows: Sequence[dict[str, Any]], counter: str = "env_steps") -> float | None:
    """``counter`` per second once a run is going: the median over its logging intervals after the first
    (which holds the start-up) of the count over the seconds, from the rows' ``counter`` and ``wall_s``.
    The median also outweighs a slow last interval (an async run's final row includes joining the
    collectors) and a checkpoint's pause. Any ``metrics.csv`` will do, whatever wrote it. None with
    fewer than two rows.
    """
    rates = interval_rates(rows, counter)
    return statistics.median(rates) if rates else None


def interval_rates(rows: Sequence[dict[str, Any]], counter: str = "env_steps") -> list[float]:
    """``counter`` per second over each logging interval after the first, oldest first (the last one says
    where a run that slowed down ended up, which the median of :func:`steady_rate` hides).
    """
    return [(float(b[counter]) - float(a[counter])) / max(float(b["wall_s"]) - float(a["wall_s"]), _TINY_S)
            for a, b in zip(rows, rows[1:], strict=False)]
