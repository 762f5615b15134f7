"""mbpo: asynchronous Model-Based Policy Optimization for Isaac-style vectorized envs."""

__version__ = "0.1.0"
