"""Every random stream of a run, derived from its one ``seed`` through numpy's ``SeedSequence``.

A stream has a path of names and numbers: ``derive(seed, "collector_env", 2, 1)`` seeds the env of
collector 2's second incarnation, ``derive(seed, "eval", 4000)`` the evaluation at 4,000 env steps. The
path is the ``SeedSequence`` spawn key, so streams are independent of each other and of the order they
are built in, and no stream is a magic offset of another.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
import torch

__all__ = ["derive", "seed_everything"]


def derive(seed: int, *path: str | int) -> int:
    """A seed in ``[0, 2**31)`` for the stream ``path`` of run seed ``seed``: 31 bits, because simulators
    pass env seeds on to numpy's legacy seeding (< 2**32) and to int32 seeds (mjlab's Warp).
    """
    key = tuple(zlib.crc32(p.encode()) if isinstance(p, str) else int(p) for p in path)
    state = np.random.SeedSequence(int(seed), spawn_key=key).generate_state(1, dtype=np.uint32)
    return int(state[0] >> np.uint32(1))


def seed_everything(seed: int) -> None:
    """Seed the process-global generators, for third-party code that draws from them (some simulators do): the
    trainer's from the run seed, each collector process's and Ray actor's from its own env's stream (they start
    from one fork server's state, so unseeded they would all draw alike, and a restart would replay its episodes).

    Nothing of ours reads them: every stream of the trainer has its own generator,
    so building an env that reseeds the globals (mjlab does) changes no draw of ours.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)

