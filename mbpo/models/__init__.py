"""The learned dynamics model: a batched probabilistic ensemble, its input normaliser, known termination rules."""

from mbpo.models.ensemble import DynamicsEnsemble, Prediction, select_elites
from mbpo.models.normalizer import Normalizer

__all__ = ["DynamicsEnsemble", "Prediction", "Normalizer", "select_elites"]
