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
