"""The learned dynamics model: a batched probabilistic ensemble, its input normaliser, known termination rules."""
