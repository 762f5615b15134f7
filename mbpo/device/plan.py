"""DevicePlan: one device D for env, learner, buffers and ensemble; CPU for acting.

Device mismatches between an Isaac-style env on ``cuda:3`` and a learner on
``cuda:0`` surface as device-side asserts far from their cause. The plan
resolves ``device`` once and checks every component at start-up, so a
mismatch is a :class:`DeviceMismatchError` that lists each component with its
device and says how to fix it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import envs
from envs.device import same_device
from mbpo.errors import MbpoError

__all__ = ["DevicePlan", "DeviceMismatchError", "device_of", "resolve_env_device", "same_device"]

ACTING_DEVICE = torch.device("cpu")


def resolve_env_device(env_device: str) -> torch.device:
    """``env.device`` resolved (:func:`envs.resolve_device`), a device this machine lacks named as ``env.device``:
    the message said ``device='cuda'`` and advised ``device='cpu'`` to a run whose ``device`` was cpu already.
    """
    try:
        return envs.resolve_device(env_device)
    except envs.DeviceUnavailableError as exc:
        raise envs.DeviceUnavailableError(re.sub(r"\bdevice=", "env.device=", str(exc))) from None


class DeviceMismatchError(MbpoError, RuntimeError):
    """A component is not on the device the plan put it on."""


def device_of(component: Any) -> torch.device:
    """Where a component keeps its tensors: a tensor, module, env, buffer, agent or device spec."""
    if isinstance(component, torch.device):
        return component
    if isinstance(component, str):
        return torch.device(component)
    if isinstance(component, torch.Tensor):
        return component.device
    if isinstance(component, nn.Module):
        devices = {t.device for t in (*component.parameters(), *component.buffers())}
        if len(devices) > 1:  # half-moved: report a device that cannot match, listing them all
            raise DeviceMismatchError(f"{type(component).__name__} has tensors on several devices: "
                                      f"{', '.join(sorted(map(str, devices)))}; move it with .to(one device)")
        if devices:
            return devices.pop()
        raise TypeError(f"cannot tell the device of {type(component).__name__}: it has no parameters or buffers")
    storage = getattr(component, "_storage", None)  # torchrl ReplayBuffer
    if storage is not None and getattr(storage, "device", None) is not None:
        return torch.device(storage.device)
    device = getattr(component, "device", None)
    if device is not None:
        return torch.device(device)
    raise TypeError(f"cannot tell the device of {type(component).__name__}; give it a .device attribute")


@dataclass(frozen=True)
class DevicePlan:
    """The run's learner device ``device``; acting always happens on ``acting_device`` (CPU); the env lives on
    ``env_device`` (``env.device``, else ``device``).
    """

    device: torch.device
    requested: str
    acting_device: torch.device = ACTING_DEVICE
    env_device: torch.device | None = None
    """None: not given, the env lives on ``device`` (read it through :meth:`env`)."""

    @property
    def env(self) -> torch.device:
        """Where the run's env lives: ``env.device`` where the config sets it, else the learner's device."""
        return self.device if self.env_device is None else self.env_device

    @classmethod
    def resolve(cls, requested: str) -> DevicePlan:
        """``auto`` is ``cuda`` when available, else ``cpu``; a GPU that is not there is an error."""
        try:
            device = envs.resolve_device(requested)
        except envs.DeviceUnavailableError as exc:
            raise envs.DeviceUnavailableError(f"device plan: {exc}") from None
        return cls(device=device, requested=requested)

    @classmethod
    def for_run(cls, device: str, env_device: str | None) -> DevicePlan:
        """The plan of a run's ``device`` and ``env.device``: ``device=auto`` follows an explicit ``env.device``
        (checked first, so that a GPU this machine lacks is named by the key that asked for it).
        """
        env = None if env_device is None else resolve_env_device(env_device)
        plan = cls.resolve(env_device if device == "auto" and env_device not in (None, "auto") else device)
        return dataclasses.replace(plan, env_device=env)

    def check(self, on_device: dict[str, Any], on_cpu: dict[str, Any] | None = None) -> None:
        """Assert that ``on_device`` components are on the plan's device and ``on_cpu`` ones on CPU.

        Raises :class:`DeviceMismatchError` naming every component and its device.
        """
        on_cpu = on_cpu or {}
        found = {name: device_of(c) for name, c in on_device.items()}
        found_cpu = {name: device_of(c) for name, c in on_cpu.items()}
        wrong = [n for n, d in found.items() if not same_device(d, self.device)]
        wrong_cpu = [n for n, d in found_cpu.items() if not same_device(d, self.acting_device)]
        if not wrong and not wrong_cpu:
            return
        lines = [f"device plan is {self.device} (device={self.requested!r}) for env, learner and buffers; "
                 f"acting happens on {self.acting_device}. Components:"]
        for name, dev in found.items():
            lines.append(f"  {name}: {dev}" + ("   <-- expected " + str(self.device) if name in wrong else ""))
        for name, dev in found_cpu.items():
            lines.append(f"  {name}: {dev}" + ("   <-- must be cpu" if name in wrong_cpu else ""))
        fixes = []
        env_devices = {str(found[n]) for n in wrong if "env" in n}
        if env_devices:
            fixes.append(f"set device={sorted(env_devices)[0]} so the learner follows the env, "
                         f"or build the env on {self.device}")
        if any("env" not in n for n in wrong):
            fixes.append(f"move the other listed components to {self.device} (build them from the plan's device)")
        if wrong_cpu:
            fixes.append("collectors always act on cpu: build the policy replica from a CPU snapshot")
        lines.append("Fix: " + "; ".join(fixes))
        raise DeviceMismatchError("\n".join(lines))
