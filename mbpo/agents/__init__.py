"""Learners behind one protocol (mbpo.agents.base.Agent): SAC for Box actions, DQN for Discrete.

May use: data, device, config (and its seeds).
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import torch

from mbpo.agents.base import Agent
from mbpo.config import AgentConfig, ConfigError

__all__ = ["Agent", "make_agent", "acting_config"]


def make_agent(
    config: AgentConfig,
    observation_space: gym.spaces.Box,
    action_space: gym.spaces.Space,
    device: torch.device | str,
    seed: int,
) -> Agent:
    """Build the learner ``config.name`` for these spaces, or say why it does not fit the env."""
    if config.name == "sac":
        if not isinstance(action_space, gym.spaces.Box):
            raise ConfigError(
                f"agent.name=sac needs a continuous (Box) action space, but the env has {action_space}; "
                "use agent.name=dqn for discrete actions"
            )
        from mbpo.agents.sac import SAC

        return SAC(config.sac, observation_space, action_space, device, seed=seed, obs_norm=config.obs_norm,
                   compile=config.compile)
    if config.name == "dqn":
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(
                f"agent.name=dqn needs a discrete action space, but the env has {action_space}; "
                "use agent.name=sac for continuous actions"
            )
        from mbpo.agents.dqn import DQN

        return DQN(config.dqn, observation_space, action_space, device, seed=seed)
    raise ConfigError(f"agent.name={config.name!r} is not known; expected sac or dqn")


def acting_config(config: AgentConfig) -> AgentConfig:
    """``config`` for an agent that only acts (a collector's CPU policy, ``mbpo eval``): SAC's precision is the
    update's, resolved for the learner's device (bf16 on a GPU), and acting runs the fp32 CPU replica; so fp32,
    which every device computes (an explicit bf16 is refused where a CPU has no native bf16).
    """
    if config.name != "sac" or config.sac.precision == "fp32":
        return config
    return dataclasses.replace(config, sac=dataclasses.replace(config.sac, precision="fp32"))
