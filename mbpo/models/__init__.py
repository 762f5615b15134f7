"""The learned dynamics model: a batched probabilistic ensemble, the loop that fits it, its input
normaliser, known termination rules.

May use: agents' networks, data, device, config.
"""

from mbpo.models.ensemble import DynamicsEnsemble, Prediction
from mbpo.models.normalizer import Normalizer
from mbpo.models.training import fit_ensemble, select_elites, train_epoch

__all__ = ["DynamicsEnsemble", "Prediction", "Normalizer", "fit_ensemble", "select_elites", "train_epoch"]
