"""Adapters between our VecEnv contract and gymnasium / torchrl (later rsl_rl)."""
