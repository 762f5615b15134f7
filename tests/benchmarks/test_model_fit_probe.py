"""benchmarks/model_fit_probe.py on a small known system (its real use reads a locomotion run's checkpoint)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from mbpo.config import ModelConfig

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import model_fit_probe  # noqa: E402

pytestmark = pytest.mark.timeout(60)

SMALL = ModelConfig(enabled=True, ensemble_size=3, num_elites=2, hidden_sizes=[32, 32],
                    weight_decay=[1e-5, 1e-5, 1e-5], batch_size=64)


def linear_rows(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Transitions of a fixed linear system with a known reward: a model can learn them exactly."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 3, generator=gen)
    action = torch.rand(n, 1, generator=gen) * 2 - 1
    a = torch.tensor([[0.0, 0.1, 0.0], [-0.1, 0.0, 0.05], [0.0, 0.0, -0.1]])
    next_obs = obs + obs @ a.T + 0.2 * action
    reward = action.squeeze(-1) - 0.1 * obs[:, 0]
    return {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs,
            "next_obs_valid": torch.ones(n, dtype=torch.bool)}


def test_a_learnable_system_is_fit_well_below_the_mean_on_rows_after_the_split() -> None:
    split = 400
    result = model_fit_probe.probe(linear_rows(split + model_fit_probe.FUTURE_ROWS), SMALL, split, epochs=20,
                                   seed=0, precision="fp32")
    assert [row["epoch"] for row in result["curve"]] == [10, 20]  # the reported epochs and the last one
    first, last = result["curve"]
    assert len(result["future_per_dim"]) == len(result["holdout_per_dim"]) == 3  # state dims; reward apart
    assert last["future"] < first["future"]
    assert last["future"] < 0.1  # about 1 would be no better than predicting the mean


def test_variants_change_one_thing_and_an_unknown_one_is_refused_by_name() -> None:
    assert model_fit_probe.variant_config(SMALL, "wide64").hidden_sizes == [64, 64]
    assert model_fit_probe.variant_config(SMALL, "wd10").weight_decay == pytest.approx([1e-4] * 3)
    assert model_fit_probe.variant_config(SMALL, "base") == SMALL
    assert model_fit_probe.variant_config(SMALL, "beta0.5").nll_beta == 0.5
    rows = linear_rows(100)
    unit = model_fit_probe.unit_deltas(rows, 60)  # the -std suffix: unit-variance state changes on the split
    torch.testing.assert_close((unit["next_obs"] - unit["obs"])[:60].std(0), torch.ones(3))
    assert unit["reward"] is rows["reward"] and unit["action"] is rows["action"]
    with pytest.raises(SystemExit, match="unknown variant 'beta2'"):  # beta-NLL's beta is 0 to 1
        model_fit_probe.variant_config(SMALL, "beta2")
    with pytest.raises(SystemExit, match="unknown variant 'deep3'; expected base, wdK"):
        model_fit_probe.variant_config(SMALL, "deep3")


def test_a_missing_checkpoint_or_a_bad_variant_stops_before_any_load(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "ckpt_000000030000.pt"
    monkeypatch.setattr(sys, "argv", ["model_fit_probe.py", str(missing)])
    with pytest.raises(SystemExit, match="no file at .*ckpt_000000030000.pt; expected a run's checkpoint"):
        model_fit_probe.main()
    monkeypatch.setattr(sys, "argv", ["model_fit_probe.py", str(missing), "--variants", "base,wide"])
    with pytest.raises(SystemExit, match="unknown variant 'wide'"):
        model_fit_probe.main()


def test_rank_correlation_and_kept_error_on_hand_computed_rows() -> None:
    error = torch.tensor([4.0, 1.0, 3.0, 0.0])
    # ranks 3 1 2 0 against 0 1 2 3: 1 - 6 * (9 + 0 + 0 + 9) / (4 * 15)
    assert model_fit_probe.rank_correlation(error, error * 10) == pytest.approx(1.0)
    assert model_fit_probe.rank_correlation(error, -error) == pytest.approx(-1.0)
    assert model_fit_probe.rank_correlation(error, torch.tensor([1.0, 2.0, 3.0, 4.0])) == pytest.approx(-0.8)
    # the two rows of lowest score are the errors 1 and 0: mean 0.5 over the mean 2.0
    assert model_fit_probe.kept_error(error, error, 0.5) == pytest.approx(0.25)
    assert model_fit_probe.kept_error(error, -error, 0.5) == pytest.approx(1.75)


class TwoElites:
    """Two members' fixed predictions of [state delta, reward] for four rows: the spread is known by hand."""

    def raw_rows(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        mean = torch.tensor([[[1.0, 0.0], [0.5, 0.0], [-1.0, 0.0], [2.0, 0.0]],
                             [[1.0, 0.0], [1.5, 0.0], [-3.0, 0.0], [2.0, 0.0]]])
        logvar = torch.tensor([0.0, 1.0, 2.0, 3.0]).log()[None, :, None].expand(2, 4, 2)
        return mean, logvar, None


def test_uncertainty_check_ranks_rows_by_the_elites_spread_and_their_predicted_variance() -> None:
    # elites' means 1, 1, -2, 2 against targets 1, 1, 0, 2: errors 0, 0, 4, 0 (over var 1);
    # spread (variance of the two means) 0, 0.25, 1, 0; predicted variance 0, 1, 2, 3
    target, var = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [2.0, 0.0]]), torch.ones(2)
    check = model_fit_probe.uncertainty_check(TwoElites(), [0, 1], torch.zeros(4, 3), target, var)  # type: ignore[arg-type]
    # the half of least spread (rows 0 and 3) has error 0; of least predicted variance (rows 0, 1) too
    assert check["disagreement"]["kept_error"]["0.5"] == 0.0
    assert check["predicted_var"]["kept_error"]["0.5"] == 0.0
    # 90% of 4 rows is 3: least spread keeps rows 0, 3, 1 (errors 0); least predicted variance 0, 1, 2
    assert check["disagreement"]["kept_error"]["0.9"] == 0.0
    assert check["predicted_var"]["kept_error"]["0.9"] == pytest.approx(4 / 3, abs=1e-3)  # over the mean 1
    assert check["bound_kept_error"] == {"0.5": 0.0, "0.8": 0.0, "0.9": 0.0}


def test_the_elites_disagree_most_where_they_are_wrong_off_the_training_data() -> None:
    """Future rows half like the training rows, half three times as far out, of a quadratic system: the model
    is wrong out there and its members disagree there, so keeping the most certain half keeps little error.
    """
    split, n = 600, model_fit_probe.FUTURE_ROWS
    rows = linear_rows(split + n)
    far = torch.arange(split + n) >= split + n // 2
    rows["obs"][far] *= 3
    rows["next_obs"] = rows["obs"] + 0.1 * rows["obs"] ** 2 + 0.2 * rows["action"]
    result = model_fit_probe.probe(rows, SMALL, split, epochs=20, seed=0, precision="fp32")
    check = result["future_uncertainty"]["disagreement"]
    assert check["rank_correlation"] > 0.5
    assert check["kept_error"]["0.5"] < 0.1  # 1 would be no better than dropping rows at random
    assert result["future_uncertainty"]["bound_kept_error"]["0.5"] <= check["kept_error"]["0.5"]
    kl = result["future_uncertainty"]["one_vs_rest_kl"]  # what model.rollout_keep_fraction ranks by
    assert kl["rank_correlation"] > 0.5 and kl["kept_error"]["0.5"] < 0.1
