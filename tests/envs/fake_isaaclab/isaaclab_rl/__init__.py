"""Fake ``isaaclab_rl``: the rsl_rl wrapper."""
