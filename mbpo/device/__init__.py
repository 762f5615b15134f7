"""Device: the device plan and its start-up and hand-off checks, precision, memory, and CPU copies of state.

May use: config, errors.
"""
