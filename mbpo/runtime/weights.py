"""Versioned weight publishing from the learner to collectors and the model thread.

The learner publishes a CPU snapshot (:meth:`mbpo.agents.base.Agent.snapshot`:
actor, critics, target nets, DQN epsilon) every ``publish_every`` updates.
A snapshot is never mutated after publication, so a reader that took the
reference holds a consistent set of weights; swapping the reference under a
lock is what makes pick-up atomic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mbpo.device.checks import check_snapshot

__all__ = ["WeightStore", "Published"]


@dataclass(frozen=True)
class Published:
    version: int
    """1 for the first publication, +1 for each after."""
    published_at: float
    """time.monotonic() at publication (policy lag in seconds is measured from it)."""
    snapshot: dict[str, Any]
    """CPU tensors only; treat as read-only."""


class WeightStore:
    """The newest published snapshot; readers poll :attr:`version` cheaply and fetch on change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: Published | None = None
        self._published_at: dict[int, float] = {}
        self._mirrors: list[Callable[[int, dict[str, Any]], None]] = []

    @property
    def version(self) -> int:
        latest = self._latest  # one reference read: atomic under the GIL
        return 0 if latest is None else latest.version

    def add_mirror(self, write: Callable[[int, dict[str, Any]], None]) -> None:
        """Also hand every publication (version, snapshot) to ``write``: e.g. shared memory for processes."""
        self._mirrors.append(write)
        if self._latest is not None:
            write(self._latest.version, self._latest.snapshot)

    def remove_mirror(self, write: Callable[[int, dict[str, Any]], None]) -> None:
        if write in self._mirrors:
            self._mirrors.remove(write)

    def publish(self, snapshot: dict[str, Any]) -> int:
        """Store ``snapshot`` as the next version (and write it to every mirror); returns that version."""
        check_snapshot(snapshot, "publish", finite=False)  # collectors never receive device tensors
        with self._lock:
            version = self.version + 1
            now = time.monotonic()
            self._latest = Published(version, now, snapshot)
            self._published_at[version] = now
            if len(self._published_at) > 4096:  # lag lookups only need recent versions
                for old in sorted(self._published_at)[:2048]:
                    del self._published_at[old]
            for write in self._mirrors:
                write(version, snapshot)
            return version

    def latest(self) -> Published | None:
        with self._lock:
            return self._latest

    def published_at(self, version: int) -> float | None:
        """When ``version`` was published (None for version 0 or a forgotten one)."""
        with self._lock:
            return self._published_at.get(version)

