"""A bounded ring of preallocated shared-memory slots that carries transitions from collector processes.

Each slot holds one batch (at most ``rows`` transitions) in a
``TensorDict.share_memory_()`` of shape ``[num_slots, rows]``. A child writes a
batch into a slot the trainer granted it and sends only the slot index back;
the trainer copies the slot into the replay buffer once and frees it. Why this
mechanism: ``share_memory_`` with torch's ``file_descriptor`` strategy passes
anonymous segments by descriptor, so nothing is named in ``/dev/shm`` and
nothing outlives the processes, even a SIGKILLed one; torchrl's
``LazyMemmapStorage`` is file-backed and its shared writer appends at a cursor,
while here ownership of each slot must pass explicitly between processes.
Memory is bounded by ``num_slots`` whatever the learner's speed.
"""

from __future__ import annotations

import queue
import threading
from typing import cast

import gymnasium as gym
import torch
from tensordict import TensorDict, TensorDictBase

from mbpo.data.transitions import ACTION, FIRST_STEP, NEXT_OBS, NEXT_OBS_VALID, OBS, REWARD, TERMINATED
from mbpo.runtime.timing import POLL_S

__all__ = ["SharedRing"]



class SharedRing:
    """``num_slots`` shared slots of ``rows`` transitions; slot bookkeeping lives in the trainer's process."""

    crosses_processes = True
    """Handed to spawned children: only its shared tensors travel (as descriptors)."""

    def __init__(self, num_slots: int, rows: int, obs_dim: int, action_space: gym.spaces.Space,
                 extra_int64: tuple[str, ...] = (), extra_float: tuple[str, ...] = (),
                 first_step: bool = False) -> None:
        if isinstance(action_space, gym.spaces.Discrete):
            action: tuple[tuple[int, ...], torch.dtype] = ((), torch.int64)
        else:  # Box unless Discrete
            action = (tuple(cast(gym.spaces.Box, action_space).shape), torch.float32)
        layout: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
            OBS: ((obs_dim,), torch.float32), ACTION: action, REWARD: ((), torch.float32),
            NEXT_OBS: ((obs_dim,), torch.float32), TERMINATED: ((), torch.bool), NEXT_OBS_VALID: ((), torch.bool),
            **{key: ((), torch.int64) for key in extra_int64},
            **{key: ((), torch.float32) for key in extra_float},
        }
        if first_step:  # n-step rows a dynamics model learns from carry their first step too
            layout.update({FIRST_STEP[key]: layout[key] for key in (REWARD, NEXT_OBS, TERMINATED, NEXT_OBS_VALID)})
        self.num_slots, self.rows = num_slots, rows
        self.keys = tuple(layout)
        self.data = TensorDict(
            {k: torch.zeros((num_slots, rows, *shape), dtype=dtype) for k, (shape, dtype) in layout.items()},
            batch_size=[num_slots, rows]).share_memory_()
        self._free: queue.Queue[int] | None = queue.Queue()
        for slot in range(num_slots):
            self._free.put(slot)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_free"] = None  # the free list is the trainer's alone
        return state

    # -- the child's side ---------------------------------------------------------------
    def write(self, slot: int, batch: TensorDictBase) -> None:
        """Copy ``batch`` (any device, at most ``rows`` transitions) into ``slot``."""
        n = batch.shape[0]
        if n > self.rows:
            raise ValueError(f"a batch of {n} transitions does not fit a ring slot of {self.rows}")
        self.data[slot, :n] = batch.select(*self.keys).to("cpu")

    # -- the trainer's side -------------------------------------------------------------
    def view(self, slot: int, n: int) -> TensorDictBase:
        """The first ``n`` transitions of ``slot``, in shared memory (valid until :meth:`free`)."""
        return self.data[slot, :n]

    def acquire(self, stop: threading.Event) -> int | None:
        """A free slot, waiting while every slot is in use; None if ``stop`` is set meanwhile."""
        assert self._free is not None, "slots are granted by the trainer's process only"
        while not stop.is_set():
            try:
                return self._free.get(timeout=POLL_S)
            except queue.Empty:
                continue
        return None

    def try_acquire(self) -> int | None:
        """A slot free right now, or None: never waits (a stopped collector's last batch takes one or none)."""
        assert self._free is not None, "slots are granted by the trainer's process only"
        try:
            return self._free.get_nowait()
        except queue.Empty:
            return None

    def free(self, slot: int) -> None:
        assert self._free is not None, "slots are freed by the trainer's process only"
        self._free.put(slot)

    @property
    def free_slots(self) -> int:
        return 0 if self._free is None else self._free.qsize()
