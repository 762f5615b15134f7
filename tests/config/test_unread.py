"""The command line's keys of a part that its config leaves off are named in a note (mbpo.config.unread); the
switches themselves, and the keys of parts that are on, are not.
"""

from __future__ import annotations

import pytest

from mbpo.config import load_config
from mbpo.config.unread import unread_overrides

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(("config", "overrides", "expected"), [
    ("configs/pendulum_sac.yaml", ["model.real_ratio=0.5", "model.macura_scale=3", "seed=2"],
     {"model.enabled=false": ["model.real_ratio=0.5", "model.macura_scale=3"]}),
    ("configs/pendulum_mbpo.yaml", ["model.real_ratio=0.5", "model.macura_scale=3", "model.lookahead.horizon=3"],
     {"model.macura=false": ["model.macura_scale=3"], "model.lookahead.enabled=false": ["model.lookahead.horizon=3"]}),
    ("configs/pendulum_mbpo.yaml", ["model.macura=true", "model.macura_scale=3"], {}),
    ("configs/pendulum_sac.yaml", ["runtime.ray.num_cpus=2", "agent.sac.renorm_warmup=5"],
     {"runtime.backend=thread": ["runtime.ray.num_cpus=2"], "agent.sac.crossq=false": ["agent.sac.renorm_warmup=5"]}),
    ("configs/pendulum_sac.yaml", ["trainer=sync", "runtime.ray.num_cpus=2"], {}),  # sync: the trainers' own note
    ("configs/pendulum_sac.yaml", ["model.enabled=false"], {}),
    ("configs/pendulum_mbpo.yaml", ["model.lookahead.enabled=false", "agent.sac.crossq=false"], {}),
    # a switch of a part that is off is unread too: the model's, with the model off
    ("configs/pendulum_sac.yaml", ["model.macura=true", "model.macura_scale=3"],
     {"model.enabled=false": ["model.macura=true", "model.macura_scale=3"]}),
])
def test_the_overrides_a_config_leaves_unread_are_grouped_by_the_setting_that_leaves_them(
        config: str, overrides: list[str], expected: dict[str, list[str]]) -> None:
    assert unread_overrides(load_config(config, overrides), overrides) == expected


def test_n_step_branch_returns_with_branches_one_step_long_are_refused() -> None:
    """model.rollout_n_step sums up to that many steps of a branch: with every branch 1 step long it did nothing,
    silently (model.macura refuses the same schedule).
    """
    from mbpo.config import ConfigError

    with pytest.raises(ConfigError, match=r"model.rollout_n_step=5 sums each branch's rewards over up to that many "
                                          r"steps, but model.rollout_schedule=\[0, 4, 1, 1\] keeps every branch 1 "
                                          r"step long"):
        load_config("configs/pendulum_mbpo.yaml", ["model.rollout_n_step=5", "model.rollout_schedule=[0,4,1,1]"])
    load_config("configs/pendulum_mbpo.yaml", ["model.rollout_n_step=5", "model.rollout_schedule=[0,4,1,5]"])
    load_config("configs/pendulum_sac.yaml", ["model.rollout_n_step=5"])  # no model: a note, not an error
