"""Isaac-style vectorized environments: batched torch tensors on one device.

``envs.make(env_id, num_envs, device, seed)`` builds one; ``envs.list_envs()``
lists the native ids. Adapters bring in gymnasium and torchrl envs and hand
ours to torchrl; ``from_rsl_rl`` brings in rsl_rl envs (Isaac Lab, mjlab).
``make_from_factory("package.module:callable", num_envs, ...)`` builds a user's env
by name and wraps it by type (``as_vec_env``); ``envs.contract.probe`` holds an env's first reset and step to
the contract. This package never imports ``mbpo``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envs.base import (
    ActionError,
    EnvTooLargeError,
    MissingExtraError,
    RenderError,
    UnsupportedSpaceError,
    VecEnv,
    available_memory,
    check_actions,
    random_actions,
)
from envs.contract import ContractError, as_float32
from envs.device import DeviceUnavailableError, resolve_device
from envs.factory import EnvFactoryError, as_vec_env, make_from_factory
from envs.registry import UnknownEnvError, list_envs, make

if TYPE_CHECKING:  # torchrl is imported lazily, only by the adapters that need it
    from torchrl.envs import EnvBase

    from envs.adapters.torchrl_env import VecEnvTorchRL


def to_torchrl(vec_env: VecEnv) -> VecEnvTorchRL:
    """Wrap one of our VecEnvs as a torchrl ``EnvBase`` (see envs.adapters.torchrl_env)."""
    from envs.adapters.torchrl_env import to_torchrl as _to_torchrl

    return _to_torchrl(vec_env)


def from_torchrl(env: EnvBase, **kwargs: Any) -> VecEnv:
    """Bring a batched torchrl ``EnvBase`` in as a VecEnv (see envs.adapters.torchrl_env)."""
    from envs.adapters.torchrl_env import from_torchrl as _from_torchrl

    return _from_torchrl(env, **kwargs)


def from_rsl_rl(vec_env: Any, obs_group: str | None = None, **kwargs: Any) -> VecEnv:
    """Bring an rsl_rl ``VecEnv`` (Isaac Lab, mjlab) in as a VecEnv (see envs.adapters.rsl_rl)."""
    from envs.adapters.rsl_rl import from_rsl_rl as _from_rsl_rl

    return _from_rsl_rl(vec_env, obs_group, **kwargs)


def to_rsl_rl(vec_env: VecEnv) -> Any:
    """One of our VecEnvs as an rsl_rl ``VecEnv``, for rsl_rl's runners (see envs.adapters.rsl_rl_export)."""
    from envs.adapters.rsl_rl_export import to_rsl_rl as _to_rsl_rl

    return _to_rsl_rl(vec_env)


__all__ = [
    "ActionError",
    "ContractError",
    "EnvTooLargeError",
    "MissingExtraError",
    "UnsupportedSpaceError",
    "RenderError",
    "available_memory",
    "as_float32",
    "as_vec_env",
    "DeviceUnavailableError",
    "EnvFactoryError",
    "UnknownEnvError",
    "VecEnv",
    "check_actions",
    "from_rsl_rl",
    "from_torchrl",
    "list_envs",
    "make",
    "make_from_factory",
    "random_actions",
    "resolve_device",
    "to_rsl_rl",
    "to_torchrl",
]
