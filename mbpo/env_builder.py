"""Every env of a run, built from its config: ``envs.make(env.id)``, or ``env.factory`` imported by name.

The trainer's env, each collector's (in whatever thread, process or Ray actor it runs), the evaluation env and
``python -m mbpo eval``'s all come from here, so they are of one kind. Only the config (plain data) needs to
reach a child: the factory is a ``"package.module:callable"`` string that the child imports itself.
"""

from __future__ import annotations

import torch

import envs
from mbpo.config import ConfigError, EnvConfig

__all__ = ["build_env"]


def build_env(env: EnvConfig, num_envs: int, device: str | torch.device, seed: int) -> envs.VecEnv:
    """``num_envs`` envs as ``env`` says, on ``device``; a factory that cannot be used is a ConfigError."""
    if env.factory is None:
        return envs.make(env.id, num_envs, device=device, seed=seed, source=env.source)
    try:
        return envs.make_from_factory(env.factory, num_envs, device=device, seed=seed, **env.kwargs)
    except envs.EnvFactoryError as exc:
        raise ConfigError(f"env.factory={env.factory!r} {exc.problem}") from exc
