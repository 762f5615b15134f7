"""Debug mode: checks at every hand-off, and an honest report of which switches are in effect.

``./run_async.sh --debug`` exports ``CUDA_LAUNCH_BLOCKING=1`` and
``TORCH_USE_CUDA_DSA=1`` before Python starts; the trainer then turns on
autograd anomaly detection, runs one collector with a small queue, and checks
device, dtype, shape and finiteness wherever data changes hands (collector ->
queue, queue -> replay buffer, buffer -> learner, model -> model buffer,
snapshot -> collector) plus host-side bounds checks on replay and elite indices.
"""

from __future__ import annotations

import os
from typing import Any, cast

import gymnasium as gym
import torch
from tensordict import TensorDictBase

from envs.device import same_device

__all__ = ["HandoffError", "check_transitions", "check_indices", "check_snapshot", "switches"]

DEBUG_QUEUE_SIZE = 2


class HandoffError(RuntimeError):
    """Data handed from one component to another is on the wrong device, of the wrong dtype or shape,
    non-finite, or indexes out of bounds.
    """


def check_transitions(
    data: TensorDictBase, where: str, device: torch.device, obs_dim: int, action_space: gym.spaces.Space
) -> None:
    """Device, dtype, shape and finiteness of a transition batch (keys from mbpo.data.transitions)."""
    b = data.shape[0]
    if isinstance(action_space, gym.spaces.Discrete):
        action: tuple[torch.dtype, tuple[int, ...]] = (torch.int64, (b,))
    else:  # Box unless Discrete
        action = (torch.float32, (b, *cast(gym.spaces.Box, action_space).shape))
    expected: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {
        "obs": (torch.float32, (b, obs_dim)),
        "next_obs": (torch.float32, (b, obs_dim)),
        "reward": (torch.float32, (b,)),
        "terminated": (torch.bool, (b,)),
        "action": action,
    }
    for key, (dtype, shape) in expected.items():
        if key not in data.keys():
            raise HandoffError(f"{where}: key {key!r} is missing; got keys {sorted(data.keys())}")
        x = data[key]
        if not same_device(x.device, device):
            raise HandoffError(f"{where}: {key} is on {x.device}; expected {device}")
        if x.dtype != dtype or tuple(x.shape) != shape:
            raise HandoffError(f"{where}: {key} is {x.dtype} {tuple(x.shape)}; expected {dtype} {shape}")
        if x.dtype.is_floating_point and not bool(torch.isfinite(x).all()):
            row = int((~torch.isfinite(x.reshape(b, -1))).any(-1).nonzero()[0, 0])
            raise HandoffError(f"{where}: {key} row {row} is not finite: {x[row].tolist()}")
    if isinstance(action_space, gym.spaces.Discrete):
        # an action index the Q-net's gather (or the model's one-hot) would read out of bounds: on a GPU that is
        # a device-side assert reported at some later call, far from the transition that caused it
        n, start = int(action_space.n), int(action_space.start)
        outside = (data["action"] < start) | (data["action"] >= start + n)
        if bool(outside.any()):
            row = int(outside.nonzero()[0, 0])
            raise HandoffError(f"{where}: action row {row} is {int(data['action'][row])}; the action space "
                               f"{action_space} allows [{start}, {start + n})")


def check_indices(index: torch.Tensor, size: int, what: str) -> None:
    """Host-side bounds check: every index in ``[0, size)`` (device-side asserts are not in stock wheels)."""
    idx = index.detach().reshape(-1).cpu()
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= size):
        raise HandoffError(f"{what}: index out of bounds: min {int(idx.min())}, max {int(idx.max())}, "
                           f"valid range [0, {size})")


def check_snapshot(snapshot: Any, where: str, finite: bool = True, path: str = "snapshot") -> None:
    """A published snapshot holds CPU tensors only (always checked on publish), all finite (debug mode)."""
    if isinstance(snapshot, torch.Tensor):
        if snapshot.device.type != "cpu":
            raise HandoffError(f"{where}: {path} is on {snapshot.device}; published snapshots must hold CPU "
                               "tensors only")
        if finite and snapshot.dtype.is_floating_point and not bool(torch.isfinite(snapshot).all()):
            raise HandoffError(f"{where}: {path} holds non-finite values")
    elif isinstance(snapshot, dict):
        for key, value in snapshot.items():
            check_snapshot(value, where, finite, f"{path}[{key!r}]")


def switches(num_collectors_asked: int, backend: str = "thread", model: bool = False, discrete: bool = False,
             in_collector: bool = False) -> list[str]:
    """One line per debug switch saying whether it is really in effect here (in this process: a collector
    process reports its own, in the same words, and only the checks it runs; ``backend="sync"``: the sync
    trainer's, which has no collectors). ``model``: the run has one (its
    hand-offs and elite indices are checked); ``discrete``: actions are checked against the Discrete space.
    """
    cuda_built = torch.version.cuda is not None
    lines = []
    for var in ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA"):
        value = os.environ.get(var)
        if value is None:
            state = "not set (./run_async.sh --debug sets it before Python starts; exporting it later is too late)"
        elif not cuda_built:
            state = f"set to {value}, but has no effect: this torch ({torch.__version__}) is built without CUDA"
        elif var == "TORCH_USE_CUDA_DSA":
            state = (f"set to {value}, but device-side assertions only exist in torch built from source with "
                     "TORCH_USE_CUDA_DSA; stock wheels ignore it (host-side index checks below cover replay "
                     "and elite indices instead)")
        elif not torch.cuda.is_available():
            state = f"set to {value}, but no CUDA device is visible, so there are no kernels to serialise"
        else:
            state = f"set to {value}: every CUDA kernel launch is synchronous"
        lines.append(f"{var}: {state}")
    checked = "device, dtype, shape, finiteness" + (", actions inside the Discrete space" if discrete else "")
    if in_collector:  # what this collector's own process checks; the trainer reports the rest
        where = {"process": "collector -> ring write", "ray": "collector -> object store"}.get(backend, "collector")
        return [*lines, f"hand-off checks ({checked}): on at {where}"]
    rollouts = ["model rollouts -> model buffer"] if model else []
    if backend == "sync":  # the sync trainer steps its env itself: no collector, no queue, no snapshot
        handoffs = ["env -> replay buffer", "replay -> learner", *rollouts]
        collecting = "collectors: none (trainer=sync steps its env itself)"
    else:
        sent = {"process": "collector -> ring write, ring read", "ray": "collector -> object store"}.get(
            backend, "collector -> queue")
        handoffs = [sent, "queue -> replay", "replay -> learner", *rollouts, "snapshot -> collectors"]
        collecting = f"collectors: 1 (config asked {num_collectors_asked}); queue: {DEBUG_QUEUE_SIZE} batches"
    lines += [
        f"autograd anomaly detection: {'on' if torch.is_anomaly_enabled() else 'off'}",
        collecting,
        f"hand-off checks ({checked}): on at {', '.join(handoffs)}",
        "host-side bounds checks: on for replay-buffer sample indices"
        + (", rollout start states and elite indices" if model else ""),
    ]
    return lines
