"""Registers the fake tasks with gymnasium on import, as Isaac Lab's ``isaaclab_tasks`` does (after the app)."""

import gymnasium as gym
from isaaclab import app

if not app.launches:
    raise ImportError("isaaclab_tasks imports Isaac Sim's modules: start the app (AppLauncher) first")

gym.register(id="Isaac-Fake-Cartpole-v0", entry_point="isaaclab.envs:ManagerBasedRLEnv", disable_env_checker=True)
