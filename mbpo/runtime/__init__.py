"""The async runtime: collectors, the bounded transition queue, versioned weights, ratio gating,
the model thread and supervision. :class:`mbpo.trainers.AsyncTrainer` wires them together.
"""
