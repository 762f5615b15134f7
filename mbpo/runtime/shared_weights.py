"""The newest published snapshot in shared memory, for collector processes: never a torn read.

Double buffering with a sequence counter per buffer (a seqlock each). The
learner, the only writer, writes a new snapshot into the buffer readers are
not directed to: it bumps that buffer's counter to odd, copies every tensor in,
bumps it to even, and only then points readers at it. A reader notes the
newest buffer and its counter, copies the buffer, and reads the counter again:
equal and even means one consistent snapshot. A reader is retried only when
two publications overtake one copy. A learner that publishes faster than a
reader copies (many cores, big snapshots, a small runtime.publish_every) could
still overtake every copy: a reader overtaken :data:`STARVED_AFTER` times in a
row says so in the shared counters, and the writer skips its publications
until that reader has its copy, for at most :data:`READ_TIMEOUT_S` (by then a
live reader has given up; one killed while it waited would otherwise hold the
weights still for the rest of the run). So the learner never waits and no
reader starves; a skipped publication is only a later version sooner.

Counters are read and written under a ``spawn``-context lock (a memory
barrier on every CPU), held for a few integers only. A reader killed inside
that tiny section would leave the lock held: the writer detects it (a
timed-out acquire), releases it and goes on.
"""

from __future__ import annotations

import time
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any

import torch

from mbpo.runtime.timing import SEQLOCK_RETRY_S, STUCK_LOCK_S

__all__ = ["SharedWeights", "STARVED_AFTER", "READ_TIMEOUT_S"]

STARVED_AFTER = 3
"""Overtaken copies in a row after which a reader asks the writer to hold its publications."""
READ_TIMEOUT_S = 10.0
"""How long a read tries for a consistent copy, and so the longest a starved reader holds publications off."""



def _unlock(lock: Any) -> None:
    """Release ``lock``, which another process may have released for us: it took us for dead after STUCK_LOCK_S
    (descheduled on a loaded machine), and a second release would raise in the learner.
    """
    try:
        lock.release()
    except ValueError:  # "semaphore or lock released too many times"
        pass


def _leaves(tree: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(tree, dict):
        return [leaf for key, value in tree.items() for leaf in _leaves(value, (*prefix, str(key)))]
    return [(prefix, tree)]


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


class SharedWeights:
    """Shared buffers shaped after a template snapshot (nested dicts of CPU tensors, ints and floats)."""

    crosses_processes = True
    """Handed to spawned children: its shared tensors travel as descriptors, its lock by the spawn context."""

    def __init__(self, template: dict[str, Any], ctx: SpawnContext | ForkServerContext) -> None:
        self._layout: list[tuple[tuple[str, ...], str, torch.dtype, tuple[int, ...]]] = []
        buffers: dict[str, torch.Tensor] = {}
        for path, value in _leaves(template):
            if isinstance(value, torch.Tensor):
                kind, t = "tensor", value
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"snapshot entry {'/'.join(path)} is a {type(value).__name__}; expected tensors, "
                                "ints and floats only")
            else:
                kind, t = type(value).__name__, torch.tensor(value, dtype=torch.float64)
            name = "/".join(path)
            self._layout.append((path, kind, t.dtype, tuple(t.shape)))
            buffers[name] = torch.zeros_like(t, device="cpu").contiguous().share_memory_()
        self._buffers = [buffers, {k: torch.zeros_like(v).share_memory_() for k, v in buffers.items()}]
        # [newest buffer, sequence of buffer 0, sequence of buffer 1, version in 0, version in 1, starved readers,
        #  when the newest of them asked (time.monotonic_ns, one clock for every process of the machine),
        #  generation of the holds (the writer ends expired ones by starting a new one)]
        self._meta = torch.tensor([0, 0, 0, 0, 0, 0, 0, 0], dtype=torch.int64).share_memory_()
        self.skipped = 0
        """Publications this writer skipped for a starved reader."""
        self.expired_holds = 0
        """Holds this writer ended for their age: a reader that asked and then died (killed) never ends its own."""
        self._lock = ctx.Lock()

    def _locked(self) -> Any:
        """The counters' lock; a holder dead inside it (held past STUCK_LOCK_S) is released for it."""
        if not self._lock.acquire(timeout=STUCK_LOCK_S):
            _unlock(self._lock)  # see the module docstring
            self._lock.acquire()
        return self._lock

    def _read_meta(self) -> list[int]:
        lock = self._locked()
        try:
            return self._meta.tolist()
        finally:
            _unlock(lock)

    def _bump(self, buffer: int, version: int | None = None) -> None:
        lock = self._locked()
        try:
            self._meta[1 + buffer] += 1
            if version is not None:
                self._meta[3 + buffer] = version
                self._meta[0] = buffer
        finally:
            _unlock(lock)

    @property
    def version(self) -> int:
        meta = self._read_meta()
        return meta[3 + meta[0]]

    def _ask_to_hold(self) -> int:
        """A starved reader asks the writer to hold its publications; returns the holds' generation it asked in."""
        lock = self._locked()
        try:
            self._meta[5] += 1
            self._meta[6] = time.monotonic_ns()
            return int(self._meta[7])
        finally:
            _unlock(lock)

    def _end_hold(self, generation: int) -> None:
        """The reader that asked in ``generation`` has its copy (or gave up); an ask the writer already ended for
        its age (a newer generation) is not taken off another reader's.
        """
        lock = self._locked()
        try:
            if int(self._meta[7]) == generation:
                self._meta[5] -= 1
        finally:
            _unlock(lock)

    def _end_expired_holds(self) -> None:
        lock = self._locked()
        try:
            self._meta[5] = 0
            self._meta[7] += 1
        finally:
            _unlock(lock)

    def write(self, version: int, snapshot: dict[str, Any]) -> None:
        """Publish ``snapshot`` as ``version`` (the learner's thread only), unless a reader was overtaken too often:
        then it is skipped and counted in ``skipped`` (the next publication carries a newer version anyway).
        """
        meta = self._read_meta()
        if meta[5] > 0 and time.monotonic_ns() - meta[6] < READ_TIMEOUT_S * 1e9:
            self.skipped += 1
            return
        if meta[5] > 0:  # older than any live reader's wait: its reader died waiting
            self.expired_holds += 1
            self._end_expired_holds()
        target = 1 - meta[0]  # the buffer readers are not directed to
        self._bump(target)  # odd: a write is in progress
        try:
            for path, value in _leaves(snapshot):
                buf = self._buffers[target]["/".join(path)]
                buf.copy_(value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.float64))
        finally:
            self._bump(target, version)  # even again; readers now go to this buffer

    def read(self, known_version: int = -1, timeout: float = READ_TIMEOUT_S) -> tuple[int, dict[str, Any]] | None:
        """``(version, snapshot copy)`` if a version newer than ``known_version`` is published, else None."""
        deadline = time.monotonic() + timeout
        overtaken, generation = 0, -1
        try:
            while True:
                meta = self._read_meta()
                newest = meta[0]
                seq, version = meta[1 + newest], meta[3 + newest]
                if version == known_version or version == 0:
                    return None
                if seq % 2 == 0:
                    copies = self._copy(newest)
                    if self._read_meta()[1 + newest] == seq:
                        return version, self._unflatten(copies)
                overtaken += 1
                if overtaken == STARVED_AFTER:
                    generation = self._ask_to_hold()  # the writer holds its publications until this read is done
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no consistent weight snapshot could be read in {timeout} s (two "
                                       "publications overtook every copy: is runtime.publish_every very small?)")
                time.sleep(SEQLOCK_RETRY_S)
        finally:
            if overtaken >= STARVED_AFTER:
                self._end_hold(generation)

    def _copy(self, buffer: int) -> dict[str, torch.Tensor]:
        """A copy of every tensor of ``buffer`` (the reader's side of the seqlock)."""
        return {name: buf.clone() for name, buf in self._buffers[buffer].items()}

    def _unflatten(self, copies: dict[str, torch.Tensor]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path, kind, _, _ in self._layout:
            t = copies["/".join(path)]
            _put(out, path, t if kind == "tensor" else (int(t.item()) if kind == "int" else float(t.item())))
        return out
