"""``parse_env_cfg``: the registered task's env cfg with the device and number of envs set."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gymnasium as gym


def parse_env_cfg(task_name: str, device: str = "cuda:0", num_envs: int | None = None,
                  use_fabric: bool | None = None) -> Any:
    if task_name not in gym.registry:
        raise ValueError(f"task {task_name!r} is not registered")
    return SimpleNamespace(scene=SimpleNamespace(num_envs=num_envs or 16), sim=SimpleNamespace(device=device),
                           seed=None, episode_length=20)
