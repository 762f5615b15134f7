"""Replay buffers: torchrl's storage for real transitions on the plan's device, and a resizable ring for model
transitions (the transition keys and batch constructors are in mbpo.data.transitions).

Sampling uses a dedicated ``torch.Generator`` so a checkpoint can restore it exactly.
"""

from __future__ import annotations

import logging

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
from torchrl.data.replay_buffers.samplers import RandomSampler

from envs.device import restore_generator
from mbpo.device.checks import check_indices

__all__ = [
    "ModelBuffer", "make_replay_buffer", "sample_real", "sample_batches", "replay_state", "load_replay_state",
    "filled_rows", "as_tensordict", "newest_indices",
]


class _StorageLines(logging.Filter):
    """torchrl writes "Initialized LazyTensorStorage with ... shape" to stdout at INFO, at each buffer's first
    write: a line in the middle of a user's output (or a one-JSON-line benchmark) on every run built from Python,
    not only from the CLI (which lowers torchrl's level). The rest of torchrl's log is left as it is.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Initialized LazyTensorStorage")


logging.getLogger("torchrl").addFilter(_StorageLines())


def make_replay_buffer(capacity: int, device: torch.device | str, generator: torch.Generator) -> ReplayBuffer:
    """A uniform replay buffer of ``capacity`` transitions stored on ``device``; ``sample(batch_size=B)``."""
    # compilable: the storage's and writer's counters as tensors; otherwise torchrl keeps them in
    # multiprocessing.Values, each with a named semaphore in /dev/shm (torchrl makes spawn the default start
    # method), held for the run's life by a buffer that never leaves its process
    return ReplayBuffer(
        storage=LazyTensorStorage(capacity, device=torch.device(device), compilable=True),
        sampler=RandomSampler(),
        writer=RoundRobinWriter(compilable=True),
        generator=generator,
        compilable=True,
    )


def sample_real(rb: ReplayBuffer, batch_size: int, check: bool = False) -> TensorDictBase:
    """``batch_size`` uniform samples; ``check`` adds a host-side bounds check of the indices (debug mode)."""
    if not check:
        return rb.sample(batch_size=batch_size)
    batch, info = rb.sample(batch_size=batch_size, return_info=True)
    check_indices(torch.as_tensor(info["index"]), len(rb), "replay buffer sample")
    return batch


def sample_batches(rb: ReplayBuffer, batch_size: int, count: int, check: bool = False) -> tuple[TensorDictBase, ...]:
    """``count`` uniform batches of ``batch_size`` from ONE sampling call.

    A learner doing 20 updates per env step pays the replay buffer's per-call overhead
    once instead of 20 times. On CPU the draws are the same, in the same order, as
    ``count`` calls of :func:`sample_real` (the index randint fills its output serially).
    """
    return sample_real(rb, batch_size * count, check).reshape(count, batch_size).unbind(0)


def newest_indices(rb: ReplayBuffer, k: int) -> torch.Tensor:
    """Storage indices of the ``k`` most recently written rows, oldest first (the writer is a ring: once the
    buffer is full they wrap around its end), on the storage's device.
    """
    n = len(rb)
    k = max(min(k, n), 0)
    cursor = int(rb.writer._cursor)  # the next row to write (torchrl's RoundRobinWriter; no public getter)
    return torch.arange(cursor - k, cursor, device=rb.storage.device) % max(n, 1)


def rows_written(rb: ReplayBuffer) -> int:
    """Rows ever written to ``rb`` (a ring keeps fewer): torchrl's writer counts them, saves the count in its
    state dict and restores it (no public getter).
    """
    return int(rb.writer._write_count)


def replay_state(rb: ReplayBuffer) -> dict:
    """The filled part of a replay buffer plus writer and sampler RNG state: CPU tensors and plain data.

    The rows are copied out: on CPU ``rb[:n]`` is a view of the whole preallocated
    storage, and ``torch.save`` of a view writes all of it (165 MB for an empty
    1M-transition HalfCheetah buffer). Storage order is kept, so uniform sampling
    by index continues exactly after :func:`load_replay_state`.
    """
    rng = rb._rng  # the generator given at construction (torchrl has no public getter)
    return {
        "data": filled_rows(rb[: len(rb)]) if len(rb) else None,
        "writer": dict(rb.writer.state_dict()),
        "generator": None if rng is None else rng.get_state(),
    }


def load_replay_state(rb: ReplayBuffer, state: dict) -> None:
    """Refill ``rb`` (new, empty, same capacity) from :func:`replay_state`."""
    if state["data"] is not None:
        rb.extend(as_tensordict(state["data"]).to(rb.storage.device))
    rb.writer.load_state_dict(state["writer"])
    if state["generator"] is not None:
        restore_generator(rb._rng, state["generator"])


def filled_rows(data: TensorDictBase) -> dict[str, torch.Tensor]:
    """``data`` as a dict of compact CPU tensors (a copy, never a view of a larger storage)."""
    return {key: value.detach().to("cpu", copy=True).contiguous() for key, value in data.items()}


def as_tensordict(data: dict[str, torch.Tensor] | TensorDictBase) -> TensorDictBase:
    """Inverse of :func:`filled_rows` (older checkpoints hold a TensorDict already)."""
    if isinstance(data, TensorDictBase):
        return data
    n = next(iter(data.values())).shape[0]
    return TensorDict(dict(data), batch_size=[n])


class ModelBuffer:
    """Ring buffer of model-generated transitions whose capacity follows the rollout length.

    MBPO sizes this buffer to hold ``retain_epochs`` epochs of rollouts, so its
    capacity changes whenever the rollout length does, keeping the newest data.
    torchrl's storages cannot be resized, hence this small ring of our own.
    """

    def __init__(self, capacity: int, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.capacity = int(capacity)
        self._data: TensorDict | None = None
        self._cursor = 0  # next write position
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, batch: TensorDict) -> None:
        """Append ``batch`` (on ``device``); the oldest transitions are overwritten when full."""
        n = batch.shape[0]
        if n == 0:
            return
        if self._data is None:
            self._data = batch[:1].expand(self.capacity).clone().to(self.device)
        if n >= self.capacity:
            batch, n = batch[n - self.capacity:], self.capacity
        idx = (torch.arange(n, device=self.device) + self._cursor) % self.capacity
        self._data[idx] = batch
        self._cursor = (self._cursor + n) % self.capacity
        self._size = min(self._size + n, self.capacity)

    def newest(self, n: int) -> TensorDict:
        """The ``n`` most recent transitions, oldest first."""
        assert self._data is not None, "newest() on a model buffer that never held a transition"
        n = min(n, self._size)
        idx = (torch.arange(n, device=self.device) + self._cursor - n) % self.capacity
        return self._data[idx]

    def resize(self, capacity: int) -> None:
        """Change the capacity, keeping the newest transitions that fit."""
        capacity = int(capacity)
        if capacity == self.capacity:
            return
        kept = self.newest(min(self._size, capacity)) if self._data is not None else None
        self.capacity, self._data, self._cursor, self._size = capacity, None, 0, 0
        if kept is not None:
            self.add(kept)

    def sample(self, batch_size: int, generator: torch.Generator) -> TensorDict:
        if self._size == 0:
            raise RuntimeError("the model buffer is empty: no model rollout has been stored yet")
        assert self._data is not None  # allocated by the first add()
        idx = torch.randint(self._size, (batch_size,), generator=generator, device=self.device)
        return self._data[idx]

    def state_dict(self) -> dict:
        """The filled rows only (rows ``[0, size)``: the ring starts at 0 and only wraps once full), so a
        checkpoint grows with the rollouts held, not with the capacity.
        """
        return {"capacity": self.capacity, "cursor": self._cursor, "size": self._size,
                "data": None if self._data is None or self._size == 0 else filled_rows(self._data[: self._size])}

    def load_state_dict(self, state: dict) -> None:
        self.capacity, self._cursor, self._size = state["capacity"], state["cursor"], state["size"]
        self._data = None
        if state["data"] is not None:
            rows = as_tensordict(state["data"]).to(self.device)
            self._data = rows[:1].expand(self.capacity).clone()
            self._data[: rows.shape[0]] = rows
