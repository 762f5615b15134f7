"""The async runtime: collectors, the bounded transition queue, versioned weights, ratio gating,
the model thread and supervision. :class:`mbpo.trainers.AsyncTrainer` wires them together.

May use: model-based, learners, data, device, config, envs; never the trainers.
"""
