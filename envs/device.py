"""Turn a user's device string into a ``torch.device`` that really exists here.

Every env takes a device *string* (``"cpu"``, ``"cuda"``, ``"cuda:N"``) so that
nothing device-like ever has to cross a process boundary as an object, and
asking for a GPU that is not there fails at construction with a clear message
instead of a CUDA error deep inside the first step.
"""

from __future__ import annotations

import hashlib

import torch

__all__ = ["resolve_device", "DeviceUnavailableError", "restore_generator", "same_device", "as_tensor_device"]


class DeviceUnavailableError(RuntimeError):
    """A device was requested that this machine does not have."""


def resolve_device(device: str | torch.device) -> torch.device:
    """Parse ``device`` and check that it exists on this machine.

    ``"auto"`` means ``cuda`` when a GPU is usable, else ``cpu``.

    ``"cuda"`` resolves to the current CUDA device (``cuda:0`` unless changed),
    so the returned device always carries an index for CUDA and can be compared
    with ``==`` against a tensor's ``.device``.
    """
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            dev = torch.device(device)
        except RuntimeError as exc:
            raise ValueError(
                f"device={device!r} is not a device string; expected 'auto', 'cpu', 'cuda' or 'cuda:N'"
            ) from exc
    else:
        raise TypeError(
            f"device must be a string such as 'cpu' or 'cuda:0', got {type(device).__name__}"
        )
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type == "meta":
        return dev
    if dev.type != "cuda":
        raise ValueError(f"device={str(dev)!r} is not supported; expected 'cpu', 'cuda' or 'cuda:N'")
    if not torch.cuda.is_available():
        raise DeviceUnavailableError(
            f"device={str(dev)!r} was requested but this machine has no usable CUDA GPU "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False); use device='cpu'"
        )
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if index >= count:
        raise DeviceUnavailableError(
            f"device={str(dev)!r} was requested but this machine has {count} CUDA device(s) "
            f"(cuda:0..cuda:{count - 1}); pick one of those or set CUDA_VISIBLE_DEVICES"
        )
    return torch.device("cuda", index)


def same_device(a: str | torch.device, b: str | torch.device) -> bool:
    """Whether ``a`` and ``b`` are one device: ``cpu:0`` is the CPU, and ``cuda`` (no index) is the current CUDA
    device, so it equals ``cuda:0`` there but not ``cuda:1`` (``torch.Generator(device="cuda").device`` has no
    index; a tensor's always has one).
    """
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


def as_tensor_device(device: str | torch.device) -> torch.device:
    """``device`` as its tensors report it: ``cpu`` for ``cpu:0``, ``cuda:N`` (the current one) for ``cuda``, so
    that an env's device, spelled either way, compares ``==`` with its tensors' ``.device``.
    """
    dev = torch.device(device)
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return dev


def restore_generator(generator: torch.Generator, state: torch.Tensor) -> bool:
    """Set ``generator`` to a checkpoint's ``state``, or, where that state is another device type's (a run resumed
    on the CPU after a GPU, or back: a CPU generator's state and a CUDA one's differ in size, and ``set_state``
    refuses the other's), seed it from that state, so the resumed run is as repeatable as before, on new streams.
    Returns whether the state was restored as it was.
    """
    if state.numel() == generator.get_state().numel():
        generator.set_state(state)
        return True
    generator.manual_seed(int.from_bytes(hashlib.sha256(state.cpu().numpy().tobytes()).digest()[:8], "little"))
    return False
