"""What validation refuses that types cannot say: another learner's keys (and what switching the learner drops),
half-open ranges, seeds no RNG takes, an env.id too long to name a run dir. Each is one ConfigError that says
what is true.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from mbpo.config import AgentConfig, Config, ConfigError, DQNConfig, SACConfig, config_from_yaml, load_config, to_yaml
from mbpo.config import validation as validation_module
from mbpo.config.validation import MAX_ENV_ID_CHARS, learner_keys

pytestmark = pytest.mark.timeout(30)
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LEARNERS = ("sac", "dqn")


def test_learner_keys_are_every_key_of_each_learner_section_and_the_marked_agent_keys() -> None:
    keys = learner_keys()
    for section, cls in (("sac", SACConfig), ("dqn", DQNConfig)):
        for f in dataclasses.fields(cls):
            assert keys[f"agent.{section}.{f.name}"][0] == section
    assert {k: learner for k, (learner, _) in keys.items() if k.count(".") == 1} == {
        "agent.n_step": "sac", "agent.obs_norm": "sac", "agent.compile": "sac"}
    assert keys["agent.sac.num_critics"] == ("sac", 2) and keys["agent.dqn.lr"] == ("dqn", 2.5e-4)


@pytest.mark.parametrize("key", sorted(learner_keys()))
def test_every_key_of_one_learner_set_off_its_default_is_refused_for_the_other(key: str) -> None:
    """One rule, read from the schema: a key added to SACConfig or DQNConfig tomorrow is covered too."""
    learner, _ = learner_keys()[key]
    other = next(name for name in LEARNERS if name != learner)
    changed = object()  # any value other than the default
    for name, refused in ((other, True), (learner, False)):
        config = Config(agent=AgentConfig(name=name))
        section, _, field = key.removeprefix("agent.").rpartition(".")
        setattr(getattr(config.agent, section) if section else config.agent, field, changed)
        if refused:
            with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=.* is for agent\.name={learner}, and this "
                                                  rf"run's agent\.name={other} does not use it; drop it"):
                validation_module._check_learner_keys(config)
        else:
            validation_module._check_learner_keys(config)


@pytest.mark.parametrize(("config", "override", "message"), [
    ("cartpole_dqn.yaml", "agent.sac.crossq=true", "agent.sac.crossq=true is for agent.name=sac, and this run's "
                                                   "agent.name=dqn does not use it; drop it (its default is false) "
                                                   "or set agent.name=sac"),
    ("cartpole_dqn.yaml", "agent.sac.num_critics=10", "agent.sac.num_critics=10 is for agent.name=sac"),
    ("cartpole_dqn.yaml", "agent.n_step=3", "agent.n_step=3 is for agent.name=sac"),
    ("pendulum_sac.yaml", "agent.dqn.lr=0.1", "agent.dqn.lr=0.1 is for agent.name=dqn, and this run's agent.name=sac"),
    ("pendulum_sac.yaml", "agent.dqn.hidden_sizes=[32,32]", "agent.dqn.hidden_sizes=[32, 32] is for agent.name=dqn"),
])
def test_another_learners_key_on_the_command_line_is_refused(config: str, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        load_config(CONFIGS / config, [override])
    load_config(CONFIGS / config, [override.split("=")[0] + "=" + _default_of(override.split("=")[0])])


def _default_of(key: str) -> str:
    value = learner_keys()[key][1]
    return str(value).lower() if isinstance(value, bool) else str(value).replace(" ", "")


def test_another_learners_key_in_the_yaml_is_refused_unless_it_is_its_default(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("env:\n  id: CartPole-v1\nagent:\n  name: dqn\n  sac:\n    num_critics: 10\n")
    with pytest.raises(ConfigError, match=r"^agent\.sac\.num_critics=10 is for agent\.name=sac"):
        load_config(f)
    f.write_text("env:\n  id: CartPole-v1\nagent:\n  name: dqn\n  sac:\n    num_critics: 2\n")
    assert load_config(f).agent.name == "dqn"


def test_switching_the_learner_drops_the_earlier_files_keys_of_the_one_it_leaves(tmp_path: Path) -> None:
    """A file tuned for SAC with agent.name=dqn on the command line trains DQN (docs/envs.md does this with the
    default config); its agent.sac keys go back to their defaults, so the run's config.yaml resumes. A key of
    the learner left behind that is set with or after the switch is still refused, whatever the overrides' order.
    """
    config = load_config(CONFIGS / "pendulum_mbpo.yaml", ["agent.name=dqn", "env.id=CartPole-v1"])
    assert config.agent.name == "dqn" and config.agent.sac == SACConfig()
    assert config_from_yaml(to_yaml(config)) == config
    for overrides in (["agent.name=dqn", "agent.sac.crossq=true"], ["agent.sac.crossq=true", "agent.name=dqn"]):
        with pytest.raises(ConfigError, match=r"^agent\.sac\.crossq=true is for agent\.name=sac"):
            load_config(CONFIGS / "pendulum_mbpo.yaml", [*overrides, "env.id=CartPole-v1"])
    (tmp_path / "dqn.yaml").write_text(f"base: {CONFIGS / 'pendulum_mbpo.yaml'}\nenv:\n  id: CartPole-v1\n"
                                       "agent:\n  name: dqn\n")
    assert load_config(tmp_path / "dqn.yaml").agent.sac == SACConfig()
    (tmp_path / "both.yaml").write_text(f"base: {tmp_path / 'dqn.yaml'}\nagent:\n  sac:\n    num_critics: 10\n")
    with pytest.raises(ConfigError, match=r"^agent\.sac\.num_critics=10 is for agent\.name=sac"):
        load_config(tmp_path / "both.yaml")


@pytest.mark.parametrize(("override", "expected"), [
    ("agent.sac.dropout=1.5", r"expected a value in [0, 1): a dropout of 1 drops every unit"),
    ("agent.sac.dropout=1.0", r"expected a value in [0, 1)"),
    ("agent.sac.adam_beta1=-0.1", r"expected a value in [0, 1): Adam with beta1 = 1"),
    ("agent.sac.adam_beta1=1.0", r"expected a value in [0, 1)"),
    ("model.holdout_ratio=1.5", r"expected a value in (0, 1): some real data must remain to train on"),
    ("agent.sac.gamma=1.5", r"expected a value in [0, 1]"),  # 1 itself is allowed here
])
def test_a_range_says_whether_its_upper_bound_is_allowed(override: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{override.split('=')[0]}=") + ".* is out of range; "
                                          + re.escape(expected)):
        load_config(None, [override])


@pytest.mark.parametrize("seed", ["-1", "99999999999999999999", str(2**64)])
def test_a_seed_no_generator_takes_is_refused(seed: str) -> None:
    with pytest.raises(ConfigError, match=rf"^seed={seed} is out of range; expected a value in "
                                          rf"\[0, {2**64 - 1}\]$"):
        load_config(None, [f"seed={seed}"])


def test_the_largest_seed_is_accepted() -> None:
    assert load_config(None, [f"seed={2**64 - 1}"]).seed == 2**64 - 1


def test_an_env_id_too_long_for_a_run_dir_name_is_refused() -> None:
    factory = "env.factory=examples.point_reach:make_env"
    with pytest.raises(ConfigError, match=rf"^env\.id='A{{40}}'\.\.\. is 300 characters long; expected at most "
                                          rf"{MAX_ENV_ID_CHARS}: it names the run dir"):
        load_config(None, ["env.id=" + "A" * 300, factory])
    assert load_config(None, ["env.id=" + "A" * MAX_ENV_ID_CHARS, factory]).env.id == "A" * MAX_ENV_ID_CHARS
