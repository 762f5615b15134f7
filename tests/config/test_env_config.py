"""env.factory and env.kwargs in the config: one way of naming the env, and a round trip through YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo.config import ConfigError, config_from_yaml, load_config, to_yaml
from mbpo.runtime.env_builder import build_env

pytestmark = pytest.mark.timeout(30)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FACTORY = ["env.id=PointReach", "env.factory=examples.point_reach:make_env"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_example_configs_load_and_build_their_env(path: Path) -> None:
    cfg = load_config(path)
    env = build_env(cfg.env, cfg.env.num_envs, "cpu", cfg.seed)
    assert env.num_envs == cfg.env.num_envs
    env.close()


@pytest.mark.parametrize("overrides, message", [
    (["env.factory=examples.point_reach:make_env"],
     r"^env.id='Pendulum-v1' names a built-in env, but env.factory='examples.point_reach:make_env' builds this "
     r"run's; with env.factory, env.id is the run's label: set a name of your own"),
    (["env.id=HalfCheetah-v5", "env.factory=examples.point_reach:make_env"], r"^env.id='HalfCheetah-v5' names a "),
    (["env.id=Mjlab-Anything", "env.factory=examples.point_reach:make_env"], r"^env.id='Mjlab-Anything' names a "),
    ([*FACTORY[:1], "env.factory=examples/point_reach.py"],
     r"^env.factory='examples/point_reach.py' is not allowed; expected \"package.module:callable\""),
    ([*FACTORY, "env.source=gymnasium"], r"^env.source='gymnasium' picks the implementation of a built-in env.id "
                                         r"and does not apply with env.factory"),
    ([*FACTORY, "env.kwargs.num_envs=3"], r"^env.kwargs.num_envs is not allowed: the factory's num_envs is passed "
                                          r"from env.num_envs$"),
    ([*FACTORY, "env.kwargs.seed=3"], r"^env.kwargs.seed is not allowed: the factory's seed is passed from the "
                                      r"run's seed$"),
    (["env.kwargs.dim=3"], r"^env.kwargs=\{'dim': 3\} is for env.factory \(keyword arguments of its callable\), "
                           r"which is not set"),
    ([*FACTORY, "env.kwargs=3"], r"^'env.kwargs=3': env.kwargs holds a value \(3\); expected a mapping \(e.g. "
                                 r"env.kwargs=\{name: 1\}\)$"),
])
def test_the_env_is_named_one_way(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_factory_and_nested_kwargs_round_trip_through_the_stored_yaml() -> None:
    cfg = load_config(None, [*FACTORY, "env.kwargs={dim: 3, goal_radius: 0.2}", "env.kwargs.extra={a: [1, 2]}"])
    assert cfg.env.kwargs == {"dim": 3, "goal_radius": 0.2, "extra": {"a": [1, 2]}}
    assert type(cfg.env.kwargs) is dict and type(cfg.env.kwargs["extra"]) is dict  # plain data for a child
    again = config_from_yaml(to_yaml(cfg))
    assert again == cfg and again.env.factory == "examples.point_reach:make_env"


def test_a_factory_that_cannot_be_used_is_a_config_error_naming_the_key() -> None:
    cfg = load_config(None, ["env.id=PointReach", "env.factory=examples.point_reach:make_envv"])
    with pytest.raises(ConfigError, match=r"^env.factory='examples.point_reach:make_envv' names nothing: examples."
                                          r"point_reach has no attribute 'make_envv'; did you mean: make_env\?"):
        build_env(cfg.env, 2, "cpu", 0)
    cfg = load_config(None, [*FACTORY, "env.kwargs.dim=-1"])  # the user's own error keeps its type and traceback
    with pytest.raises(ValueError, match="negative dimensions are not allowed"):
        build_env(cfg.env, 2, "cpu", 0)
