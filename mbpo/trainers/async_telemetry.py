"""The async run's own metrics columns: how stale collected data is, how full the queue, how busy each thread.

Each row's figures cover the interval since the previous row (the rates' interval), so a slow start does not
hide in a run-long mean.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["AsyncTelemetry"]


class AsyncTelemetry:
    """Per-batch samples between two metrics rows, and the busy seconds at the last row."""

    COLUMNS = frozenset({"queue_depth", "policy_lag_versions", "policy_lag_s", "learner_busy", "model_busy"})

    def __init__(self) -> None:
        self.lag_versions: list[int] = []
        self.lag_s: list[float] = []
        self.queue_depth_sum = self.queue_samples = 0
        self.busy_row = self.model_busy_row = 0.0
        self._last_busy: float | None = None
        """The last row's learner_busy: the progress bar's until the learner has updated since that row."""

    def ingested(self, lag_versions: int, lag_s: float, queue_depth: int) -> None:
        """One batch reached the buffer, collected ``lag_versions`` policies (``lag_s`` seconds) ago."""
        self.lag_versions.append(lag_versions)
        self.lag_s.append(lag_s)
        self.queue_depth_sum += queue_depth
        self.queue_samples += 1

    @property
    def last_lag(self) -> int:
        return self.lag_versions[-1] if self.lag_versions else 0

    def learner_busy(self, update_s: float, interval_s: float) -> float:
        """Fraction of ``interval_s`` since the last row the learner spent updating; the last row's while it has
        not updated since (a bar drawn just after a row, or the finished one, read 0 where the row said 0.9).
        """
        if update_s == self.busy_row and self._last_busy is not None:
            return self._last_busy
        return (update_s - self.busy_row) / max(interval_s, 1e-9)

    def row(self, update_s: float, model_s: float | None, interval_s: float) -> dict[str, Any]:
        """The interval's columns; starts the next interval."""
        window = max(interval_s, 1e-9)
        row: dict[str, Any] = {
            "queue_depth": self.queue_depth_sum / max(self.queue_samples, 1),
            "policy_lag_versions": float(np.mean(self.lag_versions)) if self.lag_versions else None,
            "policy_lag_s": float(np.mean(self.lag_s)) if self.lag_s else None,
            "learner_busy": round((update_s - self.busy_row) / window, 3),
        }
        self._last_busy = row["learner_busy"]
        if model_s is not None:
            row["model_busy"] = round((model_s - self.model_busy_row) / window, 3)
        self.lag_versions.clear()
        self.lag_s.clear()
        self.queue_depth_sum = self.queue_samples = 0
        self.busy_row, self.model_busy_row = update_s, model_s or 0.0
        return row
