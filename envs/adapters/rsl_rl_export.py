"""One of our VecEnvs seen as an rsl_rl ``VecEnv``: rsl_rl's own runners (PPO) train on our native envs.

rsl_rl's contract: ``num_envs``, ``num_actions``, ``max_episode_length``,
``episode_length_buf``, ``device``, ``cfg``; ``get_observations()`` returns a
TensorDict of observation groups; ``step(actions) -> (obs, rewards, dones,
extras)`` with ``extras["time_outs"]`` marking the dones that are time limits.
Our envs already reset on the same step, as rsl_rl expects. The observation
is offered as the ``policy`` group (rsl_rl's default), and the true last
observation of a finished episode as ``extras["final_obs"]`` (Isaac Lab's
``compute_final_obs`` convention; ``extras["final_obs_valid"]`` where the env
lost some), so :func:`envs.from_rsl_rl` brings it back unchanged. A step that
is both terminal and at the time limit is terminal, not a time-out (rsl_rl
bootstraps its time-outs). rsl_rl policies act unbounded: actions are clipped
to the env's bounds, as Isaac Lab's ``clip_actions`` does.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from envs.base import VecEnv

__all__ = ["RslRlExport", "to_rsl_rl", "ppo_train_cfg"]

OBS_GROUP = "policy"


class RslRlExport:
    """``vec_env`` behind rsl_rl's ``VecEnv`` contract (duck-typed: rsl_rl need not be installed)."""

    def __init__(self, vec_env: VecEnv) -> None:
        if not isinstance(vec_env.action_space, gym.spaces.Box):
            raise TypeError(f"to_rsl_rl needs continuous (Box) actions: rsl_rl's policies are Gaussian; this env "
                            f"has {vec_env.action_space}")
        self.vec_env = vec_env
        self.num_envs = vec_env.num_envs
        self.num_actions = vec_env.act_dim
        self.device = vec_env.device
        self.max_episode_length = vec_env.max_episode_steps or 0
        self.cfg: dict[str, Any] = {"env_id": getattr(vec_env, "spec_id", None), "num_envs": vec_env.num_envs}
        low = np.asarray(vec_env.action_space.low, dtype=np.float32)
        high = np.asarray(vec_env.action_space.high, dtype=np.float32)
        self._low = torch.as_tensor(low, device=self.device)
        self._high = torch.as_tensor(high, device=self.device)
        symmetric = np.allclose(-low, high)
        self.clip_actions: float | None = float(high.max()) if symmetric else None
        """The symmetric action bound (what rsl_rl wrappers call ``clip_actions``); None if asymmetric."""
        self._obs = vec_env.reset()  # rsl_rl's runners read observations before any reset
        self._pending_seed: int | None = None

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.vec_env.episode_steps

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        """rsl_rl's runner randomises episode starts (``init_at_random_ep_len``) by writing this buffer."""
        self.vec_env.episode_steps = value.to(self.vec_env.episode_steps.dtype).to(self.device)

    def _group(self, obs: torch.Tensor) -> TensorDict:
        return TensorDict({OBS_GROUP: obs}, batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> TensorDict:
        return self._group(self._obs)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        actions = torch.clamp(actions.to(self.device, torch.float32), self._low, self._high)
        obs, reward, terminated, truncated, info = self.vec_env.step(actions)
        self._obs = obs
        done = terminated | truncated
        final_obs = torch.where(done.unsqueeze(-1), info["final_obs"].to(obs.dtype), obs)  # finished rows only
        # rsl_rl bootstraps every time-out: a step that is terminal and at the time limit is terminal
        extras: dict[str, Any] = {"time_outs": truncated & ~terminated, "final_obs": self._group(final_obs), "log": {}}
        if "final_obs_valid" in info:  # the env lost some: from_rsl_rl keeps them out of the targets
            extras["final_obs_valid"] = info["final_obs_valid"]
        return self._group(obs), reward, done, extras

    def reset(self) -> tuple[TensorDict, dict[str, Any]]:
        """Not in rsl_rl's contract, but Isaac Lab and mjlab envs have it (``envs.from_rsl_rl`` calls it)."""
        seed, self._pending_seed = self._pending_seed, None
        self._obs = self.vec_env.reset(seed=seed)
        return self.get_observations(), {}

    def seed(self, seed: int = -1) -> int:
        """Seed the next reset (Isaac Lab's ``seed`` signature; ``from_rsl_rl`` calls it, then ``reset``)."""
        self._pending_seed = seed
        return seed

    def close(self) -> None:
        self.vec_env.close()


def to_rsl_rl(vec_env: VecEnv) -> RslRlExport:
    """``vec_env`` as an rsl_rl ``VecEnv``: ``OnPolicyRunner(to_rsl_rl(env), train_cfg)`` trains PPO on it."""
    return RslRlExport(vec_env)


def ppo_train_cfg(num_steps_per_env: int = 32, hidden_dims: tuple[int, ...] = (64, 64),
                  learning_rate: float = 1e-3) -> dict[str, Any]:
    """rsl_rl 5.x ``OnPolicyRunner`` settings for small tasks, after mjlab's cartpole PPO config
    (``mjlab/tasks/cartpole/cartpole_env_cfg.py``: 64x64 ELU actor and critic, 32 steps per env, 5 epochs x 4
    mini-batches, adaptive learning rate 1e-3 with desired KL 0.01, entropy 0.01, clip 0.2, gamma 0.99, lambda
    0.95); the observation groups read our ``policy`` group.
    """
    model = {"class_name": "MLPModel", "hidden_dims": list(hidden_dims), "activation": "elu",
             "obs_normalization": False}
    return {
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4,
                      "learning_rate": learning_rate, "schedule": "adaptive", "gamma": 0.99, "lam": 0.95,
                      "entropy_coef": 0.01, "desired_kl": 0.01, "max_grad_norm": 1.0, "value_loss_coef": 1.0,
                      "use_clipped_value_loss": True, "clip_param": 0.2, "normalize_advantage_per_mini_batch": False,
                      "optimizer": "adam", "share_cnn_encoders": False, "rnd_cfg": None, "symmetry_cfg": None},
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0,
                                                "std_type": "scalar"}},
        "critic": dict(model),
        "obs_groups": {"actor": [OBS_GROUP], "critic": [OBS_GROUP]},
        "num_steps_per_env": num_steps_per_env, "save_interval": 50, "multi_gpu": None, "logger": "tensorboard",
        "check_for_nan": True,
    }
