"""Data: the replay buffer (torchrl storage on the run's device), transition keys and n-step transitions.

May use: device, config.
"""
