"""What may cross into a spawned collector process: plain data, checked before the child starts.

A child rebuilds everything from plain data (field note: never pickle an agent,
a CUDA tensor or a ``torch.device`` into a worker). :func:`check_plain` walks
what is about to be sent and refuses, naming the field and what to send
instead: a CUDA tensor, a ``torch.device``, a ``threading`` primitive, a live
env, an ``nn.Module``, or anything that can only be pickled by value (a lambda,
a local function).
"""

from __future__ import annotations

import dataclasses
import enum
import pickle
from multiprocessing.connection import Connection
from multiprocessing.synchronize import SemLock
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envs.base import VecEnv

__all__ = ["check_plain", "NotPlainError"]

_PLAIN = (type(None), bool, int, float, str, bytes, enum.Enum, np.generic)
_THREADING = ("threading", "_thread", "queue", "concurrent.futures")


class NotPlainError(TypeError):
    """Something that must not (or cannot) cross a process boundary."""


def check_plain(obj: Any, name: str) -> None:
    """Raise :class:`NotPlainError` naming the first field of ``obj`` that may not go to a child process."""
    if isinstance(obj, _PLAIN):
        return
    if isinstance(obj, torch.device):
        raise NotPlainError(f"{name} is a torch.device ({obj}); send the device string {str(obj)!r} instead and "
                            "let the child create its own")
    if isinstance(obj, torch.Tensor):
        if obj.device.type != "cpu":
            raise NotPlainError(f"{name} is a tensor on {obj.device}; a CUDA tensor must never cross a process "
                                "boundary: send it on CPU (or a device string, and build it in the child)")
        return
    if type(obj).__module__.split(".")[0] in _THREADING or isinstance(obj, type(torch.Generator())):
        raise NotPlainError(f"{name} is a {type(obj).__module__}.{type(obj).__name__}, which only works within one "
                            "process; use the spawn context's primitives (ctx.Lock(), ctx.Event()) or plain data")
    if isinstance(obj, VecEnv):
        raise NotPlainError(f"{name} is a live env ({type(obj).__name__}); send its id (or a picklable factory) "
                            "and let the child build its own")
    if isinstance(obj, torch.nn.Module):
        raise NotPlainError(f"{name} is an nn.Module ({type(obj).__name__}); send a CPU state_dict snapshot and "
                            "let the child build the module")
    if isinstance(obj, (SemLock, Connection, gym.spaces.Space)) or getattr(obj, "crosses_processes", False):
        return
    if isinstance(obj, np.ndarray):
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            check_plain(value, f"{name}[{key!r}]")
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(obj):
            check_plain(value, f"{name}[{i}]")
        return
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            check_plain(getattr(obj, f.name), f"{name}.{f.name}")
        obj = type(obj)  # the fields are checked; the class itself must be importable by the child
    try:
        pickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001 - any reason it cannot be pickled is the answer
        hint = ("a lambda or a local function cannot be sent to a spawned process: define it at module level"
                if callable(obj) else "send plain data (numbers, strings, lists, dicts, CPU tensors) instead")
        raise NotPlainError(f"{name} ({type(obj).__name__}) cannot be sent to a spawned process ({exc}); "
                            f"{hint}") from None
