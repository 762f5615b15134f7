"""What an env's ``reset`` and ``step`` return, held to the VecEnv contract (envs/base.py) field by field.

Adapters and native envs fit the contract by construction; a user's own VecEnv (``env.factory``) may not,
and then fails far from the cause: a float64 obs in the learner's matmul, a float ``terminated`` in
``terminated | truncated``, a reward ``(N, 1)`` that broadcasts. :func:`probe` resets an env with a seed,
steps it once with uniformly random actions and checks both: each field is a torch tensor of the contract's
shape, on ``env.device``, of its dtype; ``info["final_obs"]`` is there on every step (trainers read it at
every step: it is the next obs of each env that finished); the optional ``info["final_obs_valid"]`` is bool.
What does not fit is a :class:`ContractError` naming the field, what it was, what was expected and how to
fix it. The checks read metadata (no sync with a GPU) but for two: the first observations must be finite, and
the probe resets the env with its seed a second time to see that ``reset(seed=...)`` seeds it
(:func:`seed_ignored`).

One mismatch is not an error: obs, reward or ``final_obs`` in another float dtype (float64, float16,
bfloat16). Cast to float32 they lose nothing the learner keeps (it computes in float32), so the probe lists
them in :attr:`Probe.float32_fields` and :func:`as_float32` wraps the env to cast them on every call.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from envs.base import StepResult, VecEnv, random_actions
from envs.device import same_device

__all__ = ["ContractError", "Probe", "probe", "check_interface", "check_first_reset", "check_reset", "check_step",
           "seed_ignored", "as_float32", "Float32Env", "FLOAT32_FIELDS"]

FLOAT32_FIELDS = ("obs", "reward", "final_obs")
"""The fields a float32 cast fits: float32 in the contract, and read by the learner as float32."""
CASTABLE = (torch.float64, torch.float16, torch.bfloat16)
"""Float dtypes a float32 cast takes without losing what the learner keeps."""
_NAMES = {"final_obs": "info['final_obs']", "final_obs_valid": "info['final_obs_valid']"}


def field_name(key: str) -> str:
    """How a user's code spells the field: ``obs``, ``reward``, ``info['final_obs']``."""
    return _NAMES.get(key, key)


class ContractError(ValueError):
    """``reset`` or ``step`` returned a field the VecEnv contract does not allow.

    ``call`` is ``reset`` or ``step`` ("" for what the env is rather than returns: ``env.device``, its spaces,
    ``reset``'s keywords), ``field`` the field as the env's code spells it, ``got`` what it was, ``expected``
    what the contract asks for and ``fix`` how to get there.
    """

    def __init__(self, call: str, field: str, got: str, expected: str, fix: str) -> None:
        what = " ".join(part for part in (f"{call} returned" if call else "", field, got) if part)
        super().__init__(f"{what}; expected {expected} (the VecEnv contract, envs/base.py): {fix}")
        self.call, self.field, self.got, self.expected, self.fix = call, field, got, expected, fix

    def __reduce__(self) -> tuple[type, tuple[str, str, str, str, str]]:  # picklable: a child may send it back
        return type(self), (self.call, self.field, self.got, self.expected, self.fix)


@dataclass
class Probe:
    """One checked reset and step of an env (:func:`probe`), float fields already cast to float32."""

    obs: torch.Tensor
    """What ``reset(seed=...)`` returned."""
    actions: torch.Tensor
    next_obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    info: dict[str, Any]
    float32_fields: dict[str, torch.dtype] = field(default_factory=dict)
    """Fields the env returned in another float dtype (that dtype): :func:`as_float32` casts them."""
    unseeded: str = ""
    """What came out differently when the probe reset the env with the same seed again and took the same actions
    (:func:`seed_ignored`); empty when it came out the same."""


def check_interface(env: VecEnv) -> None:
    """What a trainer reads of an env before it calls it: ``num_envs``, ``env.device`` (a torch device or its
    name), the two spaces, and ``reset``'s ``seed`` and ``env_ids`` keywords. Run it first, on the env as built:
    without it a missing attribute or keyword fails inside the trainer, differently on each trainer.
    """
    num_envs = getattr(env, "num_envs", None)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        numpy = isinstance(num_envs, np.integer) and num_envs >= 1
        raise ContractError("", "env.num_envs", f"= {num_envs!r}", "a positive Python int: how many envs step "
                            "together", "set env.num_envs = int(...) in the env's __init__" if numpy else
                            "set env.num_envs in the env's __init__")
    device = getattr(env, "device", None)
    try:
        if not isinstance(device, (str, torch.device)):
            raise TypeError
        torch.device(device)
    except (TypeError, RuntimeError):
        raise ContractError("", "env.device", f"= {device!r}, which is no torch device",
                            "a torch.device or its name ('cpu', 'cuda', 'cuda:N'): where the env's tensors live",
                            "set env.device = torch.device(...) in the env's __init__") from None
    for name, kinds in (("observation_space", (gym.spaces.Box,)),
                        ("action_space", (gym.spaces.Box, gym.spaces.Discrete))):
        space = getattr(env, name, None)
        if not isinstance(space, kinds):
            got = "missing" if space is None else f"= {space!r}"
            want = " or ".join(f"gymnasium.spaces.{k.__name__}" for k in kinds)
            raise ContractError("", f"env.{name}", got, f"a {want} of ONE env",
                                f"set env.{name} in the env's __init__" + (
                                    " (a discrete observation: one-hot encode it into a Box)"
                                    if name == "observation_space" and space is not None else ""))
    missing = [k for k in ("seed", "env_ids") if not _accepts(env.reset, k)]
    if missing:
        raise ContractError("", "env.reset", f"without the keyword{'s' if len(missing) > 1 else ''} "
                            f"{' and '.join(missing)} (its signature: reset{_parameters(env.reset)})",
                            "reset(seed=None, env_ids=None)",
                            "add both: seed re-seeds every env; env_ids resets only those envs (the trainer resets "
                            "an env left in a non-finite state with it)")


def _parameters(fn: Any) -> str:
    """``(seed, env_ids=None)``: the parameters as the env's code spells them, without annotations."""
    params = inspect.signature(fn).parameters.values()
    return "(" + ", ".join(p.replace(annotation=p.empty).__str__() for p in params) + ")"


def _accepts(fn: Any, keyword: str) -> bool:
    """Whether ``fn`` takes ``keyword`` as a keyword argument (by name or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: let the call tell
        return True
    return any(p.kind == p.VAR_KEYWORD or (p.name == keyword and p.kind != p.POSITIONAL_ONLY) for p in params)


def probe(env: VecEnv, seed: int) -> Probe:
    """Reset ``env`` with ``seed``, step it once with uniformly random actions (drawn from ``seed``) and check
    both; a :class:`ContractError` names the first field that does not fit. Then reset and step it once more
    the same way (:func:`seed_ignored`, in :attr:`Probe.unseeded`).

    It steps the env: use it where a later ``reset(seed=...)`` starts over (an evaluation env), or on an env
    of its own.
    """
    check_interface(env)
    obs = env.reset(seed=seed)
    casts = check_first_reset(env, obs)
    actions = random_actions(env, torch.Generator().manual_seed(seed))
    step = env.step(actions)
    casts |= check_step(env, step)
    next_obs, reward, terminated, truncated, info = _cast(step, casts)
    unseeded = seed_ignored(env, seed, obs, actions, step[0])
    return Probe(_cast_obs(obs, casts), actions, next_obs, reward, terminated, truncated, info, casts, unseeded)


def seed_ignored(env: VecEnv, seed: int, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor) -> str:
    """Reset ``env`` with ``seed`` again and take ``actions`` again: an env that re-seeds every env's random state
    in ``reset(seed=...)`` returns ``obs`` and ``next_obs`` again (up to float noise a GPU simulator may add).
    Otherwise what differed, for a warning (a reset may also depend on more than the seed: a curriculum, a
    step count). An env whose first states draw nothing passes on the reset alone.
    """
    exact = torch.device(env.device).type == "cpu"  # a GPU simulator's physics may differ in the last digits
    again = env.reset(seed=seed)
    if not _close(again, obs, exact):
        return f"reset(seed={seed}) returned other observations the second time"
    if not _close(env.step(actions)[0], next_obs, exact):
        return f"the same actions after reset(seed={seed}) led to other observations the second time"
    return ""


def _close(a: Any, b: torch.Tensor, exact: bool) -> bool:
    rtol, atol = (1e-5, 1e-6) if exact else (1e-3, 1e-4)
    return isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and bool(
        torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def check_first_reset(env: VecEnv, obs: Any) -> dict[str, torch.dtype]:
    """:func:`check_reset`, and every observation finite: nothing can act on a NaN, and ``runtime.nonfinite``
    rules only the steps after the first reset.
    """
    casts = check_reset(env, obs)
    finite = torch.isfinite(obs).all(-1)
    if not bool(finite.all()):
        row = int((~finite).nonzero()[0, 0])
        raise ContractError("reset", "obs", f"with a non-finite value in env index {row} ({obs[row].tolist()})",
                            "finite observations: no policy can act on a NaN or inf",
                            "fix the env's reset (runtime.nonfinite covers the steps after it, not the first "
                            "observation)")
    return casts


def check_reset(env: VecEnv, obs: Any) -> dict[str, torch.dtype]:
    """Check what ``env.reset`` returned; returns ``{"obs": dtype}`` when it is a float a float32 cast fits."""
    if isinstance(obs, tuple) and len(obs) == 2 and isinstance(obs[1], Mapping):  # gymnasium's (obs, info)
        raise ContractError("reset", "", "a tuple (obs, info), as gymnasium's reset does",
                            f"the observations alone, a torch.Tensor of shape (num_envs, obs_dim) = "
                            f"({env.num_envs}, {env.obs_dim})",
                            "return obs only (a gymnasium VectorEnv needs no change of its own: an env factory may "
                            "return it as it is, and envs.as_vec_env wraps it)")
    return _check("reset", "obs", obs, torch.float32, (env.num_envs, env.obs_dim), env)


def check_step(env: VecEnv, step: Any) -> dict[str, torch.dtype]:
    """Check what ``env.step`` returned; returns the fields (and their dtypes) a float32 cast fits."""
    if not isinstance(step, (tuple, list)) or len(step) != 5:
        got = f"a {type(step).__name__} of {len(step)}" if isinstance(step, (tuple, list)) else \
            f"a {type(step).__name__}"
        raise ContractError("step", "", got, "a tuple (obs, reward, terminated, truncated, info)",
                            "return all five, as gymnasium >= 0.26 does (terminated and truncated apart)")
    obs, reward, terminated, truncated, info = step
    n = env.num_envs
    casts = _check("step", "obs", obs, torch.float32, (n, env.obs_dim), env)
    casts |= _check("step", "reward", reward, torch.float32, (n,), env)
    _check("step", "terminated", terminated, torch.bool, (n,), env)
    _check("step", "truncated", truncated, torch.bool, (n,), env)
    if not isinstance(info, Mapping):
        raise ContractError("step", "info", f"as a {type(info).__name__}", "a dict holding 'final_obs'",
                            "return a dict (an empty one still needs info['final_obs'])")
    if "final_obs" not in info:
        raise ContractError(
            "step", "info", f"without 'final_obs' (keys: {sorted(map(str, info))})",
            f"info['final_obs'] on every step: float32 of shape (num_envs, obs_dim) = ({n}, {env.obs_dim}) on "
            f"{env.device}, each "
            "finished env's last observation before its same-step auto-reset",
            "add it (rows of envs that did not finish are not read: obs itself will do for them)")
    casts |= _check("step", "final_obs", info["final_obs"], torch.float32, (n, env.obs_dim), env)
    if "final_obs_valid" in info:
        _check("step", "final_obs_valid", info["final_obs_valid"], torch.bool, (n,), env)
    return casts


def _check(call: str, key: str, value: Any, dtype: torch.dtype, shape: tuple[int, ...],
           env: VecEnv) -> dict[str, torch.dtype]:
    """Raise :class:`ContractError` for the first thing ``value`` gets wrong; ``{key: its dtype}`` when only a
    float32 cast is missing.
    """
    name, device = field_name(key), torch.device(env.device)
    named = "(num_envs, obs_dim)" if len(shape) == 2 else "(num_envs,)"
    want = f"{_short(dtype)} of shape {named} = {shape} on {device}"
    if not isinstance(value, torch.Tensor):
        kind = type(value)
        raise ContractError(call, name, f"as a {kind.__module__}.{kind.__qualname__}", f"a torch.Tensor, {want}",
                            "return torch.as_tensor(..., device=env.device)")
    if tuple(value.shape) != shape:
        raise ContractError(call, name, f"of shape {tuple(value.shape)}", want, _shape_fix(key, value, shape, env))
    if not same_device(value.device, device):
        raise ContractError(call, name, f"on {value.device}", want,
                            f"return it on env.device (.to('{device}')), or set env.device to where it computes")
    if value.dtype == dtype:
        return {}
    if dtype == torch.float32 and value.dtype in CASTABLE:
        return {key: value.dtype}
    raise ContractError(call, name, f"as {_short(value.dtype)}", want, _dtype_fix(key, dtype))


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _shape_fix(key: str, value: torch.Tensor, shape: tuple[int, ...], env: VecEnv) -> str:
    if len(shape) == 1 and tuple(value.shape) == (*shape, 1):
        return f"return {field_name(key)}.squeeze(-1) (one value per env, no trailing dimension)"
    if key in ("obs", "final_obs"):
        return (f"return one row per env, flattened to obs_dim={env.obs_dim} values (from observation_space.shape="
                f"{tuple(env.observation_space.shape)}; fix observation_space if the rows are right)")
    return f"return one value per env (num_envs={env.num_envs})"


def _dtype_fix(key: str, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return f"return a bool tensor: the comparison that decides it, or {field_name(key)} > 0.5 for 0/1 values"
    if key in ("obs", "final_obs"):
        return "return obs.float(); a discrete observation (an index) learns better one-hot encoded"
    return f"return {field_name(key)}.float()"


def _cast_obs(obs: torch.Tensor, casts: Collection[str]) -> torch.Tensor:
    return obs.float() if "obs" in casts else obs


def _cast(step: StepResult, casts: Collection[str]) -> StepResult:
    """``step`` with the fields in ``casts`` cast to float32 (the rest as they are)."""
    obs, reward, terminated, truncated, info = step
    if "final_obs" in casts:
        info = {**info, "final_obs": info["final_obs"].float()}
    return (_cast_obs(obs, casts), reward.float() if "reward" in casts else reward, terminated, truncated, info)


class Float32Env(VecEnv):
    """``env`` with ``fields`` (of :data:`FLOAT32_FIELDS`) cast to float32 on every ``reset`` and ``step``.

    Any other attribute (``state``, ``state_dict``, a ``reward_fn``) reads through to ``env``.
    """

    def __init__(self, env: VecEnv, fields: tuple[str, ...]) -> None:
        unknown = sorted(set(fields) - set(FLOAT32_FIELDS))
        if unknown:
            raise ValueError(f"fields {unknown} cannot be cast to float32; expected some of {FLOAT32_FIELDS}")
        self.env, self.fields = env, tuple(fields)
        self.num_envs, self.device = env.num_envs, env.device
        self.observation_space, self.action_space = env.observation_space, env.action_space
        self.max_episode_steps, self.spec_id = env.max_episode_steps, env.spec_id
        self.render_fps, self.renders_batch = env.render_fps, env.renders_batch

    @property
    def episode_steps(self) -> torch.Tensor:  # type: ignore[override]  # reads through to the wrapped env
        return self.env.episode_steps

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        return _cast_obs(self.env.reset(seed=seed, env_ids=env_ids), self.fields)

    def step(self, actions: torch.Tensor) -> StepResult:
        return _cast(self.env.step(actions), self.fields)

    def render(self, env_index: int = 0) -> np.ndarray:
        return self.env.render(env_index)

    def close(self) -> None:
        self.env.close()


def as_float32(env: VecEnv, fields: tuple[str, ...] | Mapping[str, Any]) -> VecEnv:
    """``env`` itself when ``fields`` is empty, else a :class:`Float32Env` casting them."""
    return Float32Env(env, tuple(fields)) if fields else env
