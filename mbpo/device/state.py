"""Copies of learner state that hold no device memory: what crosses into snapshots, checkpoints and other
processes is on the CPU, whatever device trained it (field note: never send a CUDA tensor across).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["cpu_copy"]


def cpu_copy(obj: Any) -> Any:
    """Deep copy with every tensor detached and on CPU: snapshots and checkpoints never hold CUDA tensors."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)
