"""Model-based: the MBPO half of a learner (ensemble fits, branched rollouts, the model buffer) and its health.

May use: learners (agents, models), data, device, config.
"""
