"""Curve labels: runs that differ only in their seed share one; any other difference keeps them apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo.config import load_config, to_yaml
from mbpo.run.plotting import run_label

pytestmark = pytest.mark.timeout(30)
HOPPER = Path(__file__).resolve().parents[2] / "configs" / "hopper_mbpo.yaml"


def labelled(tmp_path: Path, name: str, *overrides: str) -> tuple[str, int | None]:
    run = tmp_path / name
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(load_config(HOPPER, list(overrides))))
    return run_label(run)


def test_critic_options_and_the_sync_trainer_get_curves_of_their_own(tmp_path: Path) -> None:
    plain, seed1 = labelled(tmp_path, "a"), labelled(tmp_path, "b", "seed=1")
    assert plain[0] == seed1[0] and (plain[1], seed1[1]) == (0, 1)
    others = [labelled(tmp_path, name, *o)[0] for name, o in (
        ("sync", ["trainer=sync"]), ("redq", ["agent.sac.num_critics=10", "agent.sac.num_min=2"]),
        ("droq", ["agent.sac.dropout=0.01", "agent.sac.layer_norm=true"]), ("crossq", ["agent.sac.crossq=true"]),
        ("delay", ["agent.sac.policy_delay=3"]))]
    assert len({plain[0], *others}) == 6, others
    assert others[1] == "Hopper-v5 MBPO-SAC, utd 20 (10 critics, min of 2, actor on min)"


def test_model_options_that_change_the_learners_data_get_curves_of_their_own(tmp_path: Path) -> None:
    plain = labelled(tmp_path, "a")[0]
    masked = labelled(tmp_path, "masked", "model.rollout_keep_fraction=0.5")[0]
    half = labelled(tmp_path, "half", "model.real_ratio=0.5")[0]
    beta = labelled(tmp_path, "beta", "model.nll_beta=0.5")[0]
    assert len({plain, masked, half, beta}) == 4
    assert masked == "Hopper-v5 MBPO-SAC, utd 20 [masking 0.5]"
    assert labelled(tmp_path, "free", "model.enabled=false")[0] == "Hopper-v5 SAC, utd 20"
