"""Fake Isaac Lab (tests only): the app, one simulation per process, a batched manager-based env."""
