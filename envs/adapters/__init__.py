"""Adapters between our VecEnv contract and gymnasium / torchrl and rsl_rl (Isaac Lab, mjlab)."""
