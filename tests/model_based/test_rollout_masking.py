"""M2AC's masking (model.rollout_keep_fraction): each rollout step keeps the branches the elites are surest of."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from mbpo.config import ConfigError, load_config
from mbpo.data.transitions import OBS, TERMINATED
from mbpo.model_based.rollouts import _most_certain, branched_rollouts, obs_limit_from
from mbpo.models.sampling import one_vs_rest_kl
from mbpo.run.metrics import read_metrics
from mbpo.trainers import SyncTrainer
from tests.model_based.test_rollouts import fitted
from tests.trainers.test_sync_trainer import tiny

pytestmark = pytest.mark.timeout(120)


def test_one_vs_rest_kl_is_the_hand_computed_divergence() -> None:
    """Three elites, one row, two dims. Dim 0: means 0, 1, 3 and variances 1, 1, 4; dim 1: all alike (adds 0).
    Chosen elite 0: the rest's mixture has mean 2 and variance (1 + 4) / 2 + (1 + 1) / 2 = 3.5, so the KL is
    (ln 3.5 - ln 1 - 1 + 1 / 3.5 + 2^2 / 3.5) / 2. Chosen elite 2: mixture mean 0.5, variance 1 + 0.25 = 1.25,
    KL (ln 1.25 - ln 4 - 1 + 4 / 1.25 + 2.5^2 / 1.25) / 2.
    """
    mean = torch.tensor([[[0.0, 5.0]], [[1.0, 5.0]], [[3.0, 5.0]]])
    logvar = torch.tensor([[[1.0, 2.0]], [[1.0, 2.0]], [[4.0, 2.0]]]).log()
    elite_0 = (math.log(3.5) - 1 + 1 / 3.5 + 4 / 3.5) / 2
    elite_2 = (math.log(1.25) - math.log(4) - 1 + 4 / 1.25 + 2.5**2 / 1.25) / 2
    assert one_vs_rest_kl(mean, logvar, torch.tensor([0])).item() == pytest.approx(elite_0, rel=1e-6)
    assert one_vs_rest_kl(mean, logvar, torch.tensor([2])).item() == pytest.approx(elite_2, rel=1e-6)
    same = one_vs_rest_kl(mean[..., 1:], logvar[..., 1:], torch.tensor([1]))
    assert same.item() == pytest.approx(0.0, abs=1e-6)  # elites that agree: no uncertainty


def test_scored_sampling_draws_what_sampling_draws() -> None:
    """The same elite and the same noise per row as :meth:`sample`, and the generator left in the same state."""
    agent, ens, obs = fitted("sac")
    action = agent.rollout_act(obs, agent.rollout_noise(obs.shape[0], torch.Generator().manual_seed(5)))
    plain_gen, scored_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    plain = ens.sample(obs, action, plain_gen)
    scored = ens.sample_scored(obs, action, scored_gen)
    for a, b in zip(plain, scored[:3], strict=True):
        assert a is not None and b is not None
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert torch.equal(plain_gen.get_state(), scored_gen.get_state())
    assert scored[3].shape == (obs.shape[0],) and bool((scored[3] >= -1e-5).all())  # a KL: never negative


def test_masked_rollouts_keep_the_most_certain_fraction_of_each_step() -> None:
    agent, ens, obs = fitted("sac")
    start = torch.randn(1001, 3, generator=torch.Generator().manual_seed(1))
    batch, stats = branched_rollouts(start, 1, agent, ens, None, obs_limit_from(obs),
                                     torch.Generator().manual_seed(3), keep_fraction=0.5)
    assert stats.nonfinite == 0 and stats.stored == 500 and stats.masked == 501  # floor(0.5 x 1001) kept
    g = torch.Generator().manual_seed(3)  # the rollout's own draws, again: policy noise, then the model step
    action = agent.rollout_act(start, agent.rollout_noise(1001, g))
    score = ens.sample_scored(start, action, g)[3]
    surest = start[score.argsort(stable=True)[:500]]
    kept = batch[OBS]

    def by_first(rows: torch.Tensor) -> torch.Tensor:
        return rows[rows[:, 0].argsort()]

    assert torch.equal(by_first(kept), by_first(surest))

    steps: list = []  # four steps, each keeping floor(0.8 x its live branches): the rest are masked
    _, longer = branched_rollouts(start, 4, agent, ens, None, obs_limit_from(obs), torch.Generator().manual_seed(3),
                                  keep_fraction=0.8, sink=steps.append)
    assert longer.nonfinite == 0 and len(steps) == 4
    live = [1001] + [int(step.shape[0] - step[TERMINATED].sum()) for step in steps[:-1]]  # kept, not ended
    assert [step.shape[0] for step in steps] == [int(0.8 * n) for n in live]
    assert longer.masked == sum(n - step.shape[0] for n, step in zip(live, steps, strict=True))


def test_only_live_branches_are_ranked_whatever_their_scores() -> None:
    """Dead rows (absurd predictions) stay dead even with the lowest scores; a live row's NaN or inf score
    ranks after every finite one.
    """
    score = torch.tensor([0.0, 1.0, float("inf"), float("inf"), 2.0, float("nan"), float("nan"), -5.0])
    live = torch.tensor([False, True, True, True, True, True, True, False])
    trusted, masked = _most_certain(score, live, 0.5)  # 6 live rows: keep 3
    assert trusted.tolist() == [False, True, True, False, True, False, False, False] and masked == 3
    trusted, masked = _most_certain(score, live, 0.9)  # keep 5: the finite two, both infs, the first NaN
    assert trusted.tolist() == [False, True, True, True, True, True, False, False] and masked == 1
    assert _most_certain(score, torch.zeros(8, dtype=torch.bool), 0.5)[0].sum() == 0


@pytest.mark.parametrize("batch_size", [None, 333, 17])
def test_masked_rollouts_are_the_same_for_any_batch_size(batch_size: int | None) -> None:
    agent, ens, obs = fitted("sac")
    start = torch.randn(1001, 3, generator=torch.Generator().manual_seed(1))
    runs = [branched_rollouts(start, 3, agent, ens, None, obs_limit_from(obs), torch.Generator().manual_seed(3),
                              batch_size=size, keep_fraction=0.5) for size in (1001, batch_size)]
    (whole, whole_stats), (chunked, stats) = runs
    assert stats == whole_stats
    assert all(torch.equal(chunked[k], whole[k]) for k in whole.keys())


@pytest.mark.parametrize("keep", [1.0, 0.5])
def test_a_run_logs_the_fraction_its_rollouts_masked(tmp_path: Path, keep: float) -> None:
    trainer = SyncTrainer(tiny(tmp_path, "env.id=PointMass-v0", "model.enabled=true", "model.hidden_sizes=[16,16]",
                               "model.weight_decay=[0,0,0]", "model.max_epochs=2", "model.train_freq=100",
                               "model.rollouts_per_real=5", "total_env_steps=300",
                               f"model.rollout_keep_fraction={keep}"), tmp_path)
    trainer.run()
    masked = [float(r["rollout_masked_frac"]) for r in read_metrics(tmp_path / "metrics.csv")
              if r["rollout_masked_frac"]]
    assert masked and all(m == pytest.approx(1 - keep, abs=0.01) for m in masked)  # one-step rollouts


def test_a_keep_fraction_out_of_range_or_without_two_elites_is_refused_by_name() -> None:
    out_of_range = r"model.rollout_keep_fraction=0.0 is out of range; expected a value in \(0, 1\]"
    with pytest.raises(ConfigError, match=out_of_range):
        load_config(None, ["model.enabled=true", "model.rollout_keep_fraction=0.0"])
    with pytest.raises(ConfigError, match="needs model.num_elites >= 2 \\(it is 1\\)"):
        load_config(None, ["model.enabled=true", "model.rollout_keep_fraction=0.5", "model.num_elites=1"])
