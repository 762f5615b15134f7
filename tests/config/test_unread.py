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
])
def test_the_overrides_a_config_leaves_unread_are_grouped_by_the_setting_that_leaves_them(
        config: str, overrides: list[str], expected: dict[str, list[str]]) -> None:
    assert unread_overrides(load_config(config, overrides), overrides) == expected
