"""Atomic checkpoints: write a temp file, fsync, rename; keep the newest K.

A crash in the middle of a write leaves the temp file behind, never a
half-written checkpoint under a real name, so the previous checkpoint stays
loadable. ``load_latest`` also steps back past a file that fails to load.
"""

from __future__ import annotations

import copy
import os
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["save_checkpoint", "load_latest", "list_checkpoints", "capture_rng", "restore_rng", "cpu_copy"]

PREFIX, SUFFIX = "ckpt_", ".pt"


def cpu_copy(obj: Any) -> Any:
    """Deep copy with every tensor detached and on CPU: snapshots and checkpoints never hold CUDA tensors."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_copy(v) for v in obj)
    return copy.deepcopy(obj)


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Checkpoints in ``directory``, oldest first (names carry zero-padded env steps)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.startswith(PREFIX) and p.name.endswith(SUFFIX))


def save_checkpoint(directory: str | Path, env_steps: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as ``ckpt_<env_steps>.pt`` atomically, then prune all but the newest ``keep``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{PREFIX}{env_steps:012d}{SUFFIX}"
    tmp = directory / f".{final.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink()
    return final


def load_latest(directory: str | Path, map_location: str | torch.device = "cpu") -> tuple[Path, dict[str, Any]]:
    """The newest checkpoint that loads; a corrupt newer one is skipped with a warning."""
    candidates = list_checkpoints(directory)
    if not candidates:
        raise FileNotFoundError(f"no checkpoint ({PREFIX}*{SUFFIX}) in {str(directory)!r}")
    for path in reversed(candidates):
        try:
            return path, load_checkpoint(path, map_location)
        except Exception as exc:  # noqa: BLE001 - any unreadable file: fall back to the previous one
            warnings.warn(f"checkpoint {path} could not be loaded ({exc}); trying the previous one", stacklevel=2)
    raise RuntimeError(f"none of the {len(candidates)} checkpoints in {str(directory)!r} could be loaded")


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load one checkpoint file (our own format: numpy RNG state needs full unpickling)."""
    return torch.load(path, map_location=map_location, weights_only=False)


def capture_rng() -> dict[str, Any]:
    """Every global RNG state: python, numpy, torch CPU and (if used) CUDA."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
