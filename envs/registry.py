"""``envs.make``: native torch envs first, ``Mjlab-`` ids through mjlab, other gymnasium ids through the adapter."""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym
import torch

from envs.base import EnvTooLargeError, UnknownEnvError, VecEnv, available_memory, check_num_envs
from envs.classic import TASKS, TOY_TASKS, ClassicVecEnv
from envs.device import resolve_device

__all__ = ["make", "list_envs", "UnknownEnvError", "SOURCES"]

SOURCES = ("auto", "native", "gymnasium")
"""Which implementation ``make`` builds: ``auto`` (native if there is one), only ``native``, or only
``gymnasium``'s (e.g. CPU-bound ``CartPole-v1`` for the process backend, although a native one exists)."""


def list_envs(include_gymnasium: bool = False, include_toy: bool = False) -> list[str]:
    """Ids ``make`` accepts: the native torch envs, optionally toy tasks and every gymnasium id too."""
    ids = sorted(TASKS) + (sorted(TOY_TASKS) if include_toy else [])
    if include_gymnasium:
        ids += sorted(set(gym.registry) - set(TASKS))
    return ids


def make(
    env_id: str,
    num_envs: int,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    source: str = "auto",
    **kwargs: Any,
) -> VecEnv:
    """Build ``num_envs`` copies of ``env_id`` whose tensors live on ``device``.

    Native ids (``list_envs()``) give a pure-torch env that runs on ``device``;
    ``kwargs`` go to it (``validate_actions``, ``compile``). Any other registered
    gymnasium id (MuJoCo included) runs on CPU through gymnasium's vector envs
    and hands its tensors over on ``device``; ``kwargs`` go to ``gym.make``
    except ``vectorization_mode`` and ``validate_actions``. ``Mjlab-`` ids build
    mjlab's registered task (the ``mjlab`` extra), see ``envs.adapters.mjlab_tasks``.
    ``source`` picks the implementation of an id that has both (see ``SOURCES``).
    ``render_mode="rgb_array"`` lets every kind draw frames (``VecEnv.render``): native envs draw with numpy
    whatever it says, gymnasium and mjlab envs build their offscreen renderer only when asked.
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string such as 'Pendulum-v1', got {type(env_id).__name__}")
    if source not in SOURCES:
        raise ValueError(f"source={source!r} is not allowed; expected one of {', '.join(SOURCES)}")
    num_envs = check_num_envs(num_envs)
    device = resolve_device(device)
    native = env_id in TASKS or env_id in TOY_TASKS
    _check_fits(env_id, num_envs, device, native and source != "gymnasium")  # as the env it will build
    if source == "native" and not native:
        raise UnknownEnvError(f"{env_id!r} has no native torch implementation (source=native); native ids: "
                              f"{', '.join(list_envs(include_toy=True))}; use source=auto or gymnasium")
    if source == "gymnasium" and env_id not in gym.registry:
        raise UnknownEnvError(f"{env_id!r} is not a registered gymnasium id (source=gymnasium); use source=auto "
                              "or native")
    if native and source != "gymnasium":
        task = TASKS.get(env_id) or TOY_TASKS[env_id]
        return ClassicVecEnv(task, num_envs, device=device, seed=seed, **kwargs)
    if env_id.startswith("Mjlab-") and source == "auto":
        from envs.adapters.mjlab_tasks import make_mjlab

        return make_mjlab(env_id, num_envs, device=device, seed=seed, **kwargs)
    if env_id in gym.registry:
        from envs.adapters.gymnasium_vector import GymnasiumVecEnv

        return GymnasiumVecEnv.from_id(env_id, num_envs, device=device, seed=seed, **kwargs)
    close = difflib.get_close_matches(env_id, list_envs(include_gymnasium=True, include_toy=True), n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownEnvError(
        f"unknown env id {env_id!r}: it is neither a native env ({', '.join(list_envs())}) "
        f"nor a registered gymnasium id (mjlab tasks start with 'Mjlab-').{hint}"
    )


GYMNASIUM_ENV_BYTES = 200_000
"""A rough floor for one gymnasium env instance in memory (a MuJoCo model and data are 0.1-1 MB)."""
NATIVE_WORKING_COPIES = 8
"""Tensors of a native env's size alive during a step (state, next state, obs, final obs, fresh draws...)."""


def _check_fits(env_id: str, num_envs: int, device: torch.device, native: bool) -> None:
    """Refuse, before allocating anything, a batch of envs that cannot fit the memory they will live in: the
    device's for native and mjlab envs, the host's for gymnasium's (their simulators run on the CPU whatever
    device their tensors are handed over on).
    """
    if not native and not env_id.startswith("Mjlab-"):
        device = torch.device("cpu")
    available = available_memory(device)
    if available is None:
        return
    if native:
        task = TASKS.get(env_id) or TOY_TASKS[env_id]
        per_env = 4 * NATIVE_WORKING_COPIES * (task.state_dim + 2 * int(task.observation_space.shape[0]) + 4)
        what = f"{per_env} bytes per env ({NATIVE_WORKING_COPIES} working copies of its state and observation)"
    else:
        per_env = GYMNASIUM_ENV_BYTES
        what = f"at least {per_env // 1000} kB per gymnasium env instance"
    need = per_env * num_envs
    if need > available:
        fits = max(available // per_env, 1)
        raise EnvTooLargeError(
            f"num_envs={num_envs:,} copies of {env_id} need about {_gb(need)} on {device} ({what}), but only "
            f"{_gb(available)} is available; lower env.num_envs to at most {fits:,}", fits=fits)


def _gb(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"
