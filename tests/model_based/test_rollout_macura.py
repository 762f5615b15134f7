"""MACURA (model.macura): a branch goes on while the elites' disagreement on its step stays below a threshold set
from the first step's, up to the rollout schedule's length (Frauenknecht et al. 2024).
"""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from mbpo.config import ConfigError, load_config
from mbpo.data.transitions import OBS
from mbpo.model_based.rollouts import UncertaintyThreshold, _quantile, branched_rollouts, obs_limit_from
from mbpo.models import DynamicsEnsemble
from mbpo.models.sampling import pairwise_gjs
from mbpo.run.metrics import read_metrics
from mbpo.trainers import SyncTrainer
from tests.model_based.test_rollouts import fitted
from tests.trainers.test_sync_trainer import VARIANTS, tensors, tiny, untimed

pytestmark = pytest.mark.timeout(120)

MACURA = (*VARIANTS["mbpo"], "model.macura=true", "model.macura_quantile=0.5", "model.macura_scale=1.0")
"""The sync trainer's tiny MBPO run (schedule [0, 3, 1, 3]) with MACURA ending about half the branches at the
first step (scale 1 x the median)."""


def test_pairwise_gjs_is_the_hand_computed_divergence() -> None:
    """Three elites, one row, two dims. Dim 0: means 0, 2, 4, variances 1: the pairs' dmu^2 / (2 (v_i + v_j))
    are 1, 4, 1. Dim 1: means 0, variances 1, 4, 1: ln((v_i + v_j) / (2 sqrt(v_i v_j))) is ln 1.25, 0, ln 1.25.
    Halved and averaged over the three pairs: (6 + 2 ln 1.25) / 6.
    """
    mean = torch.tensor([[[0.0, 0.0]], [[2.0, 0.0]], [[4.0, 0.0]]])
    logvar = torch.tensor([[[1.0, 1.0]], [[1.0, 4.0]], [[1.0, 1.0]]]).log()
    assert pairwise_gjs(mean, logvar).item() == pytest.approx((6 + 2 * math.log(1.25)) / 6, rel=1e-6)
    same = pairwise_gjs(mean[:, :, 1:].zero_() + 3.0, torch.zeros(3, 1, 1))
    assert same.item() == pytest.approx(0.0, abs=1e-7)  # elites that agree: no uncertainty


def test_pairwise_gjs_is_the_authors_closed_form() -> None:
    """Against MACURA's code (``calc_uncertainty_score_genShen``, averaged over the pairs as
    ``calc_pairwise_symmetric_uncertainty_for_measure_function``), written out here in float64.
    """
    g = torch.Generator().manual_seed(0)
    mean, logvar = torch.randn(5, 7, 4, generator=g, dtype=torch.float64), torch.randn(5, 7, 4, generator=g,
                                                                                       dtype=torch.float64)
    var = logvar.exp()

    def gen_shen(m1: torch.Tensor, v1: torch.Tensor, m2: torch.Tensor, v2: torch.Tensor) -> torch.Tensor:
        v_al = 1 / (0.5 / v1 + 0.5 / v2)
        mu_al = v_al * (0.5 / v1 * m1 + 0.5 / v2 * m2)
        log_term = 0.5 * v1.log().sum(1) + 0.5 * v2.log().sum(1) - v_al.log().sum(1)
        return 0.5 * ((0.5 * m1 / v1 * m1).sum(1) + (0.5 * m2 / v2 * m2).sum(1) - (mu_al / v_al * mu_al).sum(1)
                      + log_term)

    pairs = [(j, k) for j in range(5) for k in range(j)]
    theirs = sum(gen_shen(mean[j], var[j], mean[k], var[k]) for j, k in pairs) / len(pairs)
    torch.testing.assert_close(pairwise_gjs(mean, logvar), theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 0.95, 0.999, 1.0])
@pytest.mark.parametrize("n", [1, 2, 11, 1001])
def test_the_quantile_is_numpys_linear_percentile(q: float, n: int) -> None:
    """The authors take ``np.percentile(scores, zeta)`` (linear interpolation)."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    assert _quantile(x, q) == pytest.approx(float(np.percentile(x.numpy(), 100 * q)), rel=1e-6, abs=1e-7)
    assert math.isnan(_quantile(torch.zeros(0), q))


# -- a hand-built ensemble whose elites agree for p <= 0 and disagree more the larger p is -------------------
STARTS = [-9.0, -8.0, -7.0, -6.0, -5.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
MAX_LENGTH = 5


class ZeroPolicy:
    """Acts 0 everywhere (the hand-built ensemble ignores actions anyway)."""

    def rollout_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return torch.zeros(n, 1)

    def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return torch.zeros(obs.shape[0], 1)


def never(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    return torch.zeros(obs.shape[0], dtype=torch.bool)


def zero_reward(obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    return torch.zeros(obs.shape[0])


def disagreeing_ensemble() -> DynamicsEnsemble:
    """obs (p, q), three elites, one ReLU unit h = relu(p). Every elite moves p by +1 (so a branch's p after t
    steps is p_0 + t, whichever elite it goes through) and q by c_m * h with c = -1, 0, 1; the log-variance
    output is 0 for all, soft-bounded by 0.5 and -10 to the same L. The pairs' q means differ by h, 2h, h,
    so the uncertainty is (h^2 + 4 h^2 + h^2) / (8 v) / 3 = relu(p)^2 / (4 v), v = e^L: zero for p <= 0.
    """
    cfg = load_config(None, ["model.enabled=true", "model.hidden_sizes=[1]", "model.weight_decay=[0,0]",
                             "model.activation=relu", "model.ensemble_size=3", "model.num_elites=3"])
    ens = DynamicsEnsemble(cfg.model, 2, gym.spaces.Box(-1.0, 1.0, (1,)), "cpu", learn_reward=False)
    first, last = ens.net.layers  # type: ignore[misc]  # weights [members, in, out]
    with torch.no_grad():
        first.weight.zero_()
        first.weight[:, 0, 0] = 1.0  # h = relu(p); q and the action are ignored
        first.bias.zero_()
        last.weight.zero_()
        last.bias.zero_()
        last.bias[:, 0, 0] = 1.0  # mean of dp: +1 for every elite
        last.weight[:, 0, 1] = torch.tensor([-1.0, 0.0, 1.0])  # mean of dq: c_m * h
        ens.max_logvar.fill_(0.5)
        ens.min_logvar.fill_(-10.0)
    return ens


def uncertainty_at(p: float) -> float:
    """relu(p)^2 / (4 v); the log-variance output 0 soft-bounded: ln v = -10 + softplus(0.5 - softplus(0.5) + 10)."""

    def softplus(x: float) -> float:
        return math.log1p(math.exp(x))

    v = math.exp(-10.0 + softplus(0.5 - softplus(0.5) + 10.0))
    return max(p, 0.0) ** 2 / (4 * v)


def lengths(rule: UncertaintyThreshold) -> tuple[dict[float, int], object]:
    """Steps stored per start p_0 (a stored step t of a branch has p = p_0 + t), and the rollout's stats."""
    steps: list = []
    start = torch.tensor([[p, 0.0] for p in STARTS])
    _, stats = branched_rollouts(start, MAX_LENGTH, ZeroPolicy(), disagreeing_ensemble(), never,
                                 torch.full((2,), 1e6), torch.Generator().manual_seed(0), reward=zero_reward,
                                 deterministic=True, sink=steps.append, uncertainty=rule)
    stored = {p: 0 for p in STARTS}
    for t, step in enumerate(steps):
        for p in (step[OBS][:, 0] - t).tolist():
            stored[p] += 1
    return stored, stats


def test_branches_the_elites_disagree_on_end_earlier_and_agreeing_ones_run_to_the_max_length() -> None:
    """The first step's uncertainties, sorted: five zeros (p_0 <= -5), then those of p = 1 .. 6. Their 0.8-quantile
    is the 9th (position 0.8 x 10 = 8), p = 4's; times 1.1 the threshold is 17.6 / (4 v), so a branch goes on
    while p^2 < 17.6 (p <= 4). Start 1 is stored at p = 1, 2, 3, 4 and ends at 5; start 5 ends at its first
    step. The agreeing ones never leave p <= 0 in five steps and run the whole length.
    """
    stored, stats = lengths(UncertaintyThreshold(quantile=0.8, scale=1.1))
    assert stored == {-9.0: 5, -8.0: 5, -7.0: 5, -6.0: 5, -5.0: 5, 1.0: 4, 2.0: 3, 3.0: 2, 4.0: 1, 5.0: 0, 6.0: 0}
    assert (stats.stored, stats.masked, stats.nonfinite, stats.terminated) == (35, 6, 0, 0)
    assert stats.uncertainty_border == pytest.approx(1.1 * uncertainty_at(4.0), rel=1e-5)
    assert stats.uncertainty_threshold == stats.uncertainty_border  # no earlier rollouts


def test_the_threshold_is_the_mean_with_the_earlier_rollouts_borders() -> None:
    """An earlier border of 42.4 / (4 v) with this one's 17.6 / (4 v): the threshold is 30 / (4 v), so branches
    go on while p^2 < 30 (p <= 5): start 1 now runs the whole length (not ended by uncertainty: not masked).
    """
    earlier = 42.4 / 16 * uncertainty_at(4.0)
    stored, stats = lengths(UncertaintyThreshold(quantile=0.8, scale=1.1, past=(earlier,)))
    assert stored == {-9.0: 5, -8.0: 5, -7.0: 5, -6.0: 5, -5.0: 5, 1.0: 5, 2.0: 4, 3.0: 3, 4.0: 2, 5.0: 1, 6.0: 0}
    assert (stats.stored, stats.masked) == (40, 5)
    assert stats.uncertainty_border == pytest.approx(1.1 * uncertainty_at(4.0), rel=1e-5)
    assert stats.uncertainty_threshold == pytest.approx(30 / 16 * uncertainty_at(4.0), rel=1e-5)


@pytest.mark.parametrize("batch_size", [None, 333, 17])
def test_macura_rollouts_are_the_same_for_any_batch_size(batch_size: int | None) -> None:
    agent, ens, obs = fitted("sac")
    start = torch.randn(1001, 3, generator=torch.Generator().manual_seed(1))
    rule = UncertaintyThreshold(quantile=0.9, scale=1.0)
    runs = [branched_rollouts(start, 4, agent, ens, None, obs_limit_from(obs), torch.Generator().manual_seed(3),
                              batch_size=size, uncertainty=rule) for size in (1001, batch_size)]
    (whole, whole_stats), (chunked, stats) = runs
    assert stats == whole_stats
    assert 0 < stats.masked < 1001 and stats.stored > 1001 - stats.masked  # some ended early, some went on
    assert all(torch.equal(chunked[k], whole[k]) for k in whole.keys())


def test_below_the_threshold_a_branch_gets_the_elite_and_noise_of_the_plain_path() -> None:
    """A threshold no branch reaches: the rollouts are MBPO's, equal up to rounding (every elite predicts every
    branch there, in differently shaped forwards), and the generator ends where MBPO's does.
    """
    agent, ens, obs = fitted("sac")
    start = torch.randn(1001, 3, generator=torch.Generator().manual_seed(1))
    plain_gen, macura_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    plain, plain_stats = branched_rollouts(start, 3, agent, ens, None, obs_limit_from(obs), plain_gen)
    wide, stats = branched_rollouts(start, 3, agent, ens, None, obs_limit_from(obs), macura_gen,
                                    uncertainty=UncertaintyThreshold(quantile=1.0, scale=1e30))
    assert stats.masked == 0 and (stats.stored, stats.terminated) == (plain_stats.stored, plain_stats.terminated)
    for key in plain.keys():
        torch.testing.assert_close(wide[key], plain[key], rtol=1e-5, atol=1e-5)
    assert torch.equal(plain_gen.get_state(), macura_gen.get_state())


def test_a_run_with_macura_logs_its_threshold_and_resumes_exactly(tmp_path: Path) -> None:
    """A sync MBPO run: branches shorter than the schedule's 3 steps, the threshold in metrics.csv is the mean of
    every border so far (macura_history 2000), and a resume at 300 env steps carries the borders on.
    """
    full = SyncTrainer(tiny(tmp_path / "full", *MACURA, "total_env_steps=600"), tmp_path / "full")
    full.run()
    model = full.model
    assert model is not None and model.last_rollout is not None
    rows = [r for r in read_metrics(tmp_path / "full/metrics.csv") if r["rollout_uncertainty_threshold"]]
    assert len(rows) >= 3 and all(float(r["rollout_uncertainty_threshold"]) > 0 for r in rows)
    assert all(0 < float(r["rollout_masked_frac"]) < 1 and float(r["rollout_mean_length"]) < 3 for r in rows)
    assert len(model.uncertainty_borders) == model.trainings
    assert model.last_rollout.uncertainty_threshold == pytest.approx(float(np.mean(model.uncertainty_borders)))
    assert float(rows[-1]["rollout_uncertainty_threshold"]) == pytest.approx(model.last_rollout.uncertainty_threshold)

    half = SyncTrainer(tiny(tmp_path / "half", *MACURA, "total_env_steps=300", "checkpoint.every=300"),
                       tmp_path / "half")
    half.run()
    resumed = SyncTrainer.resume(tmp_path / "half", ["total_env_steps=600"])
    resumed.run()
    assert resumed.model is not None and resumed.model.uncertainty_borders == model.uncertainty_borders
    a, b = tensors(full.state_dict()), tensors(resumed.state_dict())
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    assert untimed(read_metrics(tmp_path / "full/metrics.csv")) == untimed(read_metrics(tmp_path / "half/metrics.csv"))


@pytest.mark.parametrize("overrides, message", [
    (["model.rollout_keep_fraction=0.5"],
     r"^model.macura=true and model.rollout_keep_fraction=0.5 both end branches by the elites' disagreement "
     r"\(MACURA's threshold, M2AC's fraction\); set one of the two: rollout_keep_fraction=1.0 or macura=false$"),
    (["model.num_elites=1"],
     r"^model.macura=true measures how much the elites disagree, which needs model.num_elites >= 2 \(it is 1\); "
     r"raise num_elites or set macura=false$"),
    (["model.rollout_schedule=[20,100,1,1]"],
     r"^model.macura=true adapts each branch's length up to model.rollout_schedule's, which is 1 throughout "
     r"\(\[20, 100, 1, 1\]\); give it a longer length, e.g. rollout_schedule=\[0,0,10,10\] \(the MACURA paper's "
     r"10\), or set macura=false$"),
    (["model.macura_quantile=1.5"], r"^model.macura_quantile=1.5 is out of range; expected a value in \[0, 1\]$"),
    (["model.macura_scale=0"], r"^model.macura_scale=0.0 is out of range; expected a value in \(0, inf\)$"),
    (["model.macura_history=0"], r"^model.macura_history=0 is out of range; expected a value in \[1, inf\)$"),
])
def test_contradictory_or_out_of_range_macura_keys_are_refused_in_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        load_config(None, ["model.enabled=true", "model.macura=true", "model.rollout_schedule=[0,0,10,10]",
                           *overrides])
    assert "\n" not in str(refused.value)
    load_config(None, ["model.enabled=true", "model.macura=true", "model.rollout_schedule=[0,0,10,10]"])  # fine
