"""Run configuration, one job per module: :mod:`~mbpo.config.schema` (the typed keys and their help),
:mod:`~mbpo.config.validation` (what types cannot say: choices, ranges, finiteness, budgets) and
:mod:`~mbpo.config.loading` (YAML and ``key=value`` overrides into a validated :class:`Config`).

May use: errors.
"""

from mbpo.config.loading import config_from_yaml, load_config, to_yaml
from mbpo.config.python_values import check, checked_copy
from mbpo.config.schema import (
    DEFAULT_ROLLOUTS_PER_REAL,
    AgentConfig,
    CheckpointConfig,
    Config,
    ConfigError,
    DQNConfig,
    EnvConfig,
    LookaheadConfig,
    ModelConfig,
    RayConfig,
    RuntimeConfig,
    SACConfig,
    describe,
    rollouts_per_transition,
    updates_per_transition,
)

__all__ = ["Config", "ConfigError", "EnvConfig", "SACConfig", "DQNConfig", "AgentConfig", "ModelConfig",
           "LookaheadConfig", "CheckpointConfig", "RayConfig", "RuntimeConfig", "DEFAULT_ROLLOUTS_PER_REAL",
           "describe", "updates_per_transition", "rollouts_per_transition", "load_config", "config_from_yaml",
           "to_yaml", "check", "checked_copy"]
