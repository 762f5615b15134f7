"""mbpo: asynchronous Model-Based Policy Optimization for Isaac-style vectorized envs."""

from mbpo import own_envs

own_envs.install()

__version__ = "0.1.0"
