"""Config: YAML + dotted overrides; unknown keys, wrong types and bad ranges rejected with clear messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo.config import ConfigError, describe, load_config, to_yaml

pytestmark = pytest.mark.timeout(30)
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_configs_load(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.agent.name in ("sac", "dqn") and cfg.env.num_envs >= 1
    assert cfg.model.enabled == path.stem.endswith("_mbpo")


def test_required_keys_exist_with_their_names() -> None:
    cfg = load_config(None, ["seed=3", "device=cpu", "total_env_steps=500", "eval_every=100",
                             "run_dir=/tmp/x", "env.id=CartPole-v1", "env.num_envs=4", "agent.name=dqn"])
    assert (cfg.seed, cfg.device, cfg.total_env_steps, cfg.eval_every, cfg.run_dir) == (3, "cpu", 500, 100, "/tmp/x")
    assert (cfg.env.id, cfg.env.num_envs, cfg.agent.name) == ("CartPole-v1", 4, "dqn")


def test_overrides_beat_the_file(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("env:\n  num_envs: 2\nagent:\n  utd_ratio: 0.5\n")
    cfg = load_config(f, ["env.num_envs=8"])
    assert cfg.env.num_envs == 8 and cfg.agent.utd_ratio == 0.5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["env.nm_envs=3"], "unknown config key 'env.nm_envs'; known keys under env: device, id, num_envs"),
        (["lr=3"], "unknown config key 'lr'"),
        (["env.num_envs=abc"], "config key 'env.num_envs': Value 'abc' of type 'str' could not be converted to Integer"),
        (["env.num_envs=0"], r"env.num_envs=0 is out of range; expected a value in \[1, inf\]"),
        (["agent.utd_ratio=0"], r"agent.utd_ratio=0.0 is out of range; expected a value in \(0, inf\]"),
        (["agent.sac.gamma=1.5"], r"agent.sac.gamma=1.5 is out of range; expected a value in \[0, 1\]"),
        (["agent.name=ppo"], "agent.name='ppo' is not allowed; expected one of sac, dqn"),
        (["agent.sac.precision=fp16"], "expected one of fp32, bf16"),
        (["device=gpu"], "device='gpu' is not allowed; expected auto, cpu, cuda or cuda:N"),
        (["agent.sac.hidden_sizes=[]"], "expected a non-empty list of positive ints"),
        (["seed"], "is not of the form key=value"),
        (["model.holdout_ratio=1.0"], r"expected a value in \(0, 1\)"),
    ],
)
def test_bad_values_are_rejected_before_anything_runs(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_bad_yaml_key_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("agent:\n  sac:\n    learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match="unknown config key 'agent.sac.learning_rate'"):
        load_config(f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_every_field_is_documented_and_yaml_round_trips(tmp_path: Path) -> None:
    rows = describe()
    assert {k for k, _, _ in rows} >= {"seed", "device", "env.id", "agent.sac.precision", "agent.dqn.epsilon_end"}
    assert all(doc for _, _, doc in rows), [k for k, _, doc in rows if not doc]
    cfg = load_config(None, ["env.num_envs=5", "agent.sac.target_entropy=-2.0"])
    f = tmp_path / "resolved.yaml"
    f.write_text(to_yaml(cfg))
    assert load_config(f) == cfg
