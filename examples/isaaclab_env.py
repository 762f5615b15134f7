"""Isaac Lab tasks through ``env.factory``, built the way Isaac Lab's own rsl_rl scripts build them.

``scripts/reinforcement_learning/rsl_rl/train.py`` in Isaac Lab starts the app, then makes the task with
``gym.make(task, cfg=env_cfg)`` and wraps it with ``RslRlVecEnvWrapper``; :func:`make_env` does the same,
once per process that needs an env (the trainer's, and each collector process's). The wrapper is an rsl_rl
VecEnv, so mbpo reads it through ``envs.from_rsl_rl`` (Isaac Lab's ``policy`` observation group)::

    env:
      id: Isaac-Cartpole-v0                  # the run's label
      factory: examples.isaaclab_env:make_env
      kwargs: {task: Isaac-Cartpole-v0}
      num_envs: 4096
    runtime:
      backend: process                       # Isaac Sim runs one simulation per process

Isaac Sim holds one simulation per process, and a run needs two: the training env and the evaluation env.
With ``runtime.backend=process`` the training envs live in the collector processes and the trainer's process
holds only the evaluation env (the env it builds first, to read the spaces, is closed before that one is
built). Run it with Isaac Lab's Python (``./isaaclab.sh -p -m mbpo train ...``) and mbpo installed into it.
"""

from __future__ import annotations

import atexit
from typing import Any

_app: Any = None
"""Isaac Sim's app in this process, once started (Isaac Lab's modules import only after it)."""


def launch_app(device: str, headless: bool = True) -> Any:
    """Start Isaac Sim in this process, once; it is closed when the process exits, as train.py closes it."""
    global _app
    if _app is None:
        from isaaclab.app import AppLauncher

        _app = AppLauncher(headless=headless, device=device).app
        atexit.register(_app.close)
    return _app


def make_env(num_envs: int, device: str, seed: int | None, task: str, headless: bool = True,
             clip_actions: float | None = None) -> Any:
    """``num_envs`` copies of the Isaac Lab ``task`` on ``device``, wrapped for rsl_rl."""
    launch_app(device, headless)
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401 - registers Isaac Lab's tasks with gymnasium
    from isaaclab_rl.rsl_rl import RslRlVecEnvWrapper
    from isaaclab_tasks.utils import parse_env_cfg

    env_cfg = parse_env_cfg(task, device=device, num_envs=num_envs)
    if seed is not None:  # some randomisation happens while the env is built, so the seed goes in the cfg
        env_cfg.seed = seed
    env = gym.make(task, cfg=env_cfg)
    return RslRlVecEnvWrapper(env, clip_actions=clip_actions)
