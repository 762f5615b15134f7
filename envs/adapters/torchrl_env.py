"""Bridges between our VecEnv contract and torchrl's ``EnvBase``, both ways.

The two conventions disagree on auto-reset. Our VecEnvs reset finished envs on
the same step (``obs`` is the next episode's first observation, the true last
one is in ``info["final_obs"]``); torchrl reports the true last observation in
``("next", "observation")`` and expects a partial ``reset`` with a ``"_reset"``
mask afterwards. :func:`to_torchrl` stashes the new-episode observation until
that reset comes; :func:`from_torchrl` uses ``step_and_maybe_reset`` so both
observations are at hand after one call.

``info["final_obs"]`` from :func:`from_torchrl` is whatever the torchrl env puts
in ``("next", obs_key)``. torchrl's ``GymEnv(id, num_envs=N)`` over a gymnasium 1.x
vector env loses it (a zero placeholder on finishing steps): for such an env
``info["final_obs_valid"]`` is False on those rows, so no transition learns from
the placeholder (a time-out bootstraps from its own state instead). Wrap single
envs in ``SerialEnv``/``ParallelEnv`` when the true last observation matters.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    TensorSpec,
    Unbounded,
)
from torchrl.envs import EnvBase

from envs.base import StepResult, VecEnv, check_actions, resolve_env_ids
from envs.device import as_tensor_device

__all__ = ["VecEnvTorchRL", "TorchRLVecEnv", "to_torchrl", "from_torchrl"]


class VecEnvTorchRL(EnvBase):
    """One of our VecEnvs seen as a batched torchrl env (batch size ``[num_envs]``).

    A partial reset (``"_reset"`` mask) hands a finished env the first observation
    of the episode the VecEnv already started on the finishing step, and ends the
    running episode of any other masked env with the VecEnv's partial
    ``reset(env_ids=...)``. A full reset (no tensordict or no mask) resets every
    env, with the seed from ``set_seed`` if one is pending. A finished env whose
    true last observation the VecEnv lost (``info["final_obs_valid"]`` False)
    shows torchrl the placeholder, with a warning the first time.
    """

    def __init__(self, vec_env: VecEnv) -> None:
        n, device = vec_env.num_envs, vec_env.device
        super().__init__(device=device, batch_size=torch.Size([n]))
        self.vec_env = vec_env
        obs_space = vec_env.observation_space
        shape = (n, vec_env.obs_dim)
        if obs_space.is_bounded("both"):
            low = torch.as_tensor(obs_space.low, dtype=torch.float32).reshape(-1).expand(shape)
            high = torch.as_tensor(obs_space.high, dtype=torch.float32).reshape(-1).expand(shape)
            obs_spec: TensorSpec = Bounded(low, high, shape=shape, dtype=torch.float32, device=device)
        else:
            obs_spec = Unbounded(shape=shape, dtype=torch.float32, device=device)
        self.observation_spec = Composite(observation=obs_spec, shape=(n,), device=device)
        space = vec_env.action_space
        if isinstance(space, gym.spaces.Discrete):
            self._action_offset = int(space.start)
            self.action_spec = Categorical(int(space.n), shape=(n,), dtype=torch.int64, device=device)
        elif isinstance(space, gym.spaces.Box):
            self._action_offset = 0
            ashape = (n, vec_env.act_dim)
            low = torch.as_tensor(space.low, dtype=torch.float32).reshape(-1).expand(ashape)
            high = torch.as_tensor(space.high, dtype=torch.float32).reshape(-1).expand(ashape)
            self.action_spec = Bounded(low, high, shape=ashape, dtype=torch.float32, device=device)
        else:
            raise TypeError(
                f"to_torchrl supports Box and Discrete action spaces, got {type(space).__name__}"
            )
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32, device=device)
        flag = Categorical(2, shape=(n, 1), dtype=torch.bool, device=device)
        self.done_spec = Composite(
            done=flag.clone(), terminated=flag.clone(), truncated=flag.clone(), shape=(n,), device=device
        )
        self._pending_seed: int | None = None
        self._obs: torch.Tensor | None = None  # what torchrl currently sees
        self._vec_obs: torch.Tensor | None = None  # what the VecEnv last returned
        # envs that finished on the last step and whose new episode torchrl has not reset into yet
        self._pending = torch.zeros(n, dtype=torch.bool, device=device)
        self._warned_lost = False

    def _flags(self, terminated: torch.Tensor, truncated: torch.Tensor) -> dict[str, torch.Tensor]:
        terminated, truncated = terminated.reshape(-1, 1), truncated.reshape(-1, 1)
        return {"done": terminated | truncated, "terminated": terminated, "truncated": truncated}

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: object) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None or self._obs is None:
            self._obs = self._vec_obs = self.vec_env.reset(seed=self._pending_seed)
            self._pending_seed = None
            self._pending.zero_()
        else:
            assert self._vec_obs is not None  # set together with self._obs
            mask = mask.reshape(self.batch_size[0]).to(self._obs.device)
            running = mask & ~self._pending
            if bool(running.any()):  # their episodes end now; pending envs already started a new one
                self._vec_obs = self.vec_env.reset(env_ids=running)
            self._obs = torch.where(mask.unsqueeze(-1), self._vec_obs, self._obs)
            self._pending = self._pending & ~mask
        zeros = torch.zeros(self.batch_size, dtype=torch.bool, device=self.device)
        return TensorDict(
            {"observation": self._obs, **self._flags(zeros, zeros.clone())},
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get("action")
        action = action.long() + self._action_offset if self.vec_env.is_discrete else action.float()
        obs, reward, terminated, truncated, info = self.vec_env.step(action)
        self._vec_obs = obs  # new episode's first obs for finished envs, see _reset
        finished = terminated | truncated
        # the contract fills final_obs for finished envs only; the others' next observation is obs itself
        self._obs = torch.where(finished.unsqueeze(-1), info["final_obs"].to(obs.dtype), obs)
        lost = info.get("final_obs_valid")
        if lost is not None and not self._warned_lost and bool((finished & ~lost).any()):
            self._warned_lost = True
            warnings.warn(f"{type(self.vec_env).__name__} lost the true last observation of finished envs "
                          "(info['final_obs_valid'] False): torchrl gets its placeholder as ('next', 'observation') "
                          "on those steps, which a time-out's bootstrap reads; give the env its final observations "
                          "(envs/base.py) if that matters", stacklevel=2)
        self._pending = finished
        return TensorDict(
            {
                "observation": self._obs,
                "reward": reward.reshape(-1, 1).to(torch.float32),
                **self._flags(terminated, truncated),
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _set_seed(self, seed: int | None) -> None:
        """Applied at the next full reset, so a seeded rollout is reproducible."""
        self._pending_seed = None if seed is None else int(seed)

    def close(self, *, raise_if_closed: bool = True) -> None:
        if not self.is_closed:
            self.vec_env.close()
        super().close(raise_if_closed=raise_if_closed)


def to_torchrl(vec_env: VecEnv) -> VecEnvTorchRL:
    """Wrap ``vec_env`` as a torchrl ``EnvBase``; ``.vec_env`` gives it back."""
    if not isinstance(vec_env, VecEnv):
        raise TypeError(f"to_torchrl expects an envs.VecEnv, got {type(vec_env).__name__}")
    return VecEnvTorchRL(vec_env)


_SUPPORTED = "Bounded/Unbounded (float), Categorical or OneHot"


def _box(spec: TensorSpec) -> gym.spaces.Box:
    """One env's Box from a batched Bounded/Unbounded spec, flattened to 1-D."""
    dim = int(np.prod(spec.shape[1:]))
    if isinstance(spec, Bounded):
        low = spec.space.low.expand(spec.shape)[0].reshape(dim).cpu().numpy()
        high = spec.space.high.expand(spec.shape)[0].reshape(dim).cpu().numpy()
        return gym.spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
    return gym.spaces.Box(-np.inf, np.inf, shape=(dim,), dtype=np.float32)


def _space(spec: TensorSpec, what: str) -> gym.spaces.Space:
    """Convert one batched spec to one env's gymnasium space, or say why not."""
    if isinstance(spec, (MultiCategorical, MultiOneHot, Binary)):
        pass  # subclasses of the supported kinds with a different meaning
    elif isinstance(spec, (Bounded, Unbounded)) and (what != "action" or spec.dtype.is_floating_point):
        return _box(spec)
    elif isinstance(spec, Categorical) and tuple(spec.shape[1:]) in ((), (1,)):
        return gym.spaces.Discrete(int(spec.n))
    elif isinstance(spec, OneHot) and len(spec.shape) == 2:
        return gym.spaces.Discrete(int(spec.n))
    raise TypeError(
        f"from_torchrl cannot convert the {what} spec {type(spec).__name__} "
        f"(dtype {spec.dtype}, shape {tuple(spec.shape)}); supported: {_SUPPORTED} "
        "with one batch dimension"
    )


class TorchRLVecEnv(VecEnv):
    """A batched torchrl env (batch size ``[N]``) behind our VecEnv contract."""

    def __init__(self, env: EnvBase, obs_key: str = "observation", seed: int | None = None) -> None:
        if len(env.batch_size) != 1 or env.batch_size[0] < 1:
            raise ValueError(
                f"from_torchrl needs a batched env with batch_size [N], got {list(env.batch_size)}; "
                "wrap a single env in torchrl.envs.SerialEnv/ParallelEnv or use a batched env "
                "(e.g. GymEnv(..., num_envs=N))"
            )
        keys = list(env.observation_spec.keys(True, True))
        if obs_key not in keys:
            raise KeyError(
                f"observation key {obs_key!r} not in the env's observation spec; available: {keys}"
            )
        self.env, self.obs_key = env, obs_key
        self.num_envs = int(env.batch_size[0])
        self.device = torch.device("cpu") if env.device is None else as_tensor_device(env.device)
        self._action_spec = env.action_spec
        obs_spec = env.observation_spec[obs_key]
        obs_space = _space(obs_spec, "observation")
        if not isinstance(obs_space, gym.spaces.Box):
            raise TypeError(
                f"from_torchrl needs a Bounded/Unbounded observation spec at {obs_key!r} (a VecEnv observes "
                f"float vectors), got {type(obs_spec).__name__}"
            )
        self.observation_space = obs_space
        self.action_space = _space(self._action_spec, "action")
        # Known only when the env is one of ours; probing other envs' attributes can
        # start their workers (SerialEnv/ParallelEnv forward __getattr__).
        ours = isinstance(env, VecEnvTorchRL)
        self.max_episode_steps = env.vec_env.max_episode_steps if ours else None
        self.episode_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._final_obs_lost = _loses_final_obs(env)
        self._pending_seed = seed  # applied at the first full reset, like the other adapters
        self._td: TensorDictBase | None = None
        self._closed = False

    def _obs(self, td: TensorDictBase) -> torch.Tensor:
        return td.get(self.obs_key).reshape(self.num_envs, -1).to(self.device, torch.float32)

    def _flag(self, td: TensorDictBase, key: str) -> torch.Tensor | None:
        value = td.get(key, None)
        return None if value is None else value.reshape(self.num_envs).to(self.device, torch.bool)

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Reset every env (``set_seed`` first, when given a seed), or just ``env_ids`` through ``"_reset"``."""
        if env_ids is not None:
            return self._reset_ids(env_ids, seed)
        seed, self._pending_seed = (self._pending_seed if seed is None else seed), None
        if seed is not None:
            self.env.set_seed(int(seed))
        self._td = self.env.reset()
        self.episode_steps.zero_()
        return self._obs(self._td)

    def _reset_ids(self, env_ids: torch.Tensor, seed: int | None) -> torch.Tensor:
        mask, _ = resolve_env_ids(env_ids, self.num_envs, self.device, seed)
        if self._td is None:
            raise RuntimeError("call reset() before reset(env_ids=...)")
        if bool(mask.any()):
            reset_keys, groups = self.env.reset_keys, self.env.done_keys_groups
            if len(reset_keys) != 1:
                raise NotImplementedError(
                    f"reset(env_ids=...) needs a torchrl env with one reset key, got {reset_keys}"
                )
            shape = self.env.full_done_spec[groups[0][0]].shape  # "_reset" is shaped like "done": (N, 1)
            td = self._td.clone()
            td.set(reset_keys[0], mask.reshape(-1, *[1] * (len(shape) - 1)).expand(shape))
            # torchrl's own auto-reset path: only the masked envs reset, the other entries are kept
            self._td = self.env.reset(td, select_reset_only=True)
            self.episode_steps = torch.where(mask, torch.zeros_like(self.episode_steps), self.episode_steps)
        return self._obs(self._td)

    def _to_env_action(self, actions: torch.Tensor) -> torch.Tensor:
        spec = self._action_spec
        if isinstance(spec, OneHot):
            actions = torch.nn.functional.one_hot(actions, int(spec.n))
        return actions.reshape(spec.shape).to(spec.device or self.device, spec.dtype)

    def step(self, actions: torch.Tensor) -> StepResult:
        if self._td is None:
            raise RuntimeError("call reset() before step()")
        check_actions(actions, self.action_space, self.num_envs, self.device)
        self._td.set(self.env.action_key, self._to_env_action(actions))
        td, self._td = self.env.step_and_maybe_reset(self._td)
        nxt = td.get("next")
        done = self._flag(nxt, "done")
        terminated = self._flag(nxt, "terminated")
        truncated = self._flag(nxt, "truncated")
        # torchrl's done is terminated | truncated: a missing flag is what done leaves over (only "done": a finish
        # that is not a known truncation is terminal; "done" and "terminated": a done that is not terminal is a
        # truncation, such as a time limit)
        no = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        if terminated is None:
            terminated = no if done is None else done if truncated is None else done & ~truncated
        if truncated is None:
            truncated = no if done is None else done & ~terminated
        finished = terminated | truncated if done is None else done | terminated | truncated
        reward = nxt.get(self.env.reward_key).reshape(self.num_envs).to(self.device, torch.float32)
        steps = self.episode_steps
        self.episode_steps = torch.where(finished, torch.zeros_like(steps), steps + 1)
        info = {"final_obs": self._obs(nxt)}
        if self._final_obs_lost:
            info["final_obs_valid"] = ~finished
        return self._obs(self._td), reward, terminated, truncated, info

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.env.close(raise_if_closed=False)  # an unstarted SerialEnv counts as closed


def _loses_final_obs(env: EnvBase) -> bool:
    """Whether ``env`` is torchrl's ``GymEnv(id, num_envs=N)``: a gymnasium vector env under a ``GymWrapper``
    (behind the transforms ``GymEnv`` adds), whose finishing steps report a placeholder as the last observation.
    """
    from torchrl.envs import GymWrapper, TransformedEnv

    base = env.base_env if isinstance(env, TransformedEnv) else env
    return isinstance(base, GymWrapper) and isinstance(getattr(base, "_env", None), gym.vector.VectorEnv)


def from_torchrl(env: EnvBase, obs_key: str = "observation", seed: int | None = None) -> TorchRLVecEnv:
    """Bring a batched torchrl env in as a VecEnv reading observations from ``obs_key``; ``seed`` seeds its first
    full reset (one without a seed of its own).
    """
    if not isinstance(env, EnvBase):
        raise TypeError(f"from_torchrl expects a torchrl.envs.EnvBase, got {type(env).__name__}")
    return TorchRLVecEnv(env, obs_key=obs_key, seed=seed)
