"""Run records: the run dir, checkpoints, metrics, plots, evaluation, provenance, throughput and log helpers.

May use: learners (evaluation acts with the policy), data, device, config.
"""
