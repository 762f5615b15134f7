"""The bounded collector -> learner queue.

Memory stays bounded whatever the learner's speed: a full queue either blocks
the producer (the default) or drops its oldest batch and counts the drop.
Every wait polls a stop event, so no producer or consumer outlives a shutdown.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from mbpo.runtime.timing import POLL_S

__all__ = ["TransitionQueue", "QUEUE_FULL_POLICIES"]

T = TypeVar("T")
QUEUE_FULL_POLICIES = ("block", "drop_oldest")


class TransitionQueue(Generic[T]):
    """A FIFO of at most ``max_size`` items with a block or drop-oldest policy when full."""

    def __init__(self, max_size: int, when_full: str = "block", on_drop: Callable[[T], None] | None = None) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        if when_full not in QUEUE_FULL_POLICIES:
            raise ValueError(f"when_full={when_full!r} is not allowed; expected one of {QUEUE_FULL_POLICIES}")
        self.max_size = max_size
        self.when_full = when_full
        self.on_drop = on_drop
        self.dropped = 0
        """Batches discarded by drop_oldest."""
        self._items: collections.deque[T] = collections.deque()
        self._cond = threading.Condition()

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, item: T, stop: threading.Event, on_wait: Callable[[], None] | None = None,
            drop: bool = True) -> bool:
        """Enqueue ``item``; False if ``stop`` was set while blocked on a full queue (item not enqueued).

        ``on_wait`` (a callable) is called on every poll while blocked, e.g. a heartbeat. ``drop=False`` blocks
        under drop_oldest too: an item worth less than a batch (a collector's last open n-step windows) must not
        evict one.
        """
        with self._cond:
            while len(self._items) >= self.max_size:
                if self.when_full == "drop_oldest" and drop:
                    oldest = self._items.popleft()
                    self.dropped += 1
                    if self.on_drop is not None:
                        self.on_drop(oldest)
                    break
                if stop.is_set():
                    return False
                if on_wait is not None:
                    on_wait()
                self._cond.wait(POLL_S)
            self._items.append(item)
            self._cond.notify_all()
            return True

    def get(self, timeout: float) -> T | None:
        """The oldest item, waiting up to ``timeout`` seconds; None if none arrived."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout)
            if not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def drain(self) -> list[T]:
        """Every queued item, oldest first (used at shutdown: nothing collected is lost)."""
        with self._cond:
            items = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return items
