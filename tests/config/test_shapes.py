"""A value of the wrong shape (a list for a section, a mapping for a list), the text ``None`` for null, YAML merge
keys, and errors that name the file they come from: each mistake is one ConfigError naming the key and what it
should hold, never OmegaConf's TypeError or a message about a key the user never wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo.config import ConfigError, load_config

pytestmark = pytest.mark.timeout(30)


NOT_YAML = ("; expected a number, true/false, null, text, a list [a, b] or a mapping {k: v} (quote text that starts "
            "with @, %, ! or holds brackets)")


@pytest.mark.parametrize(("override", "message"), [
    ("agent.sac.hidden_sizes.0=32", "'agent.sac.hidden_sizes.0=32': agent.sac.hidden_sizes holds a mapping "
                                    "({'0': 32}); expected a list (e.g. agent.sac.hidden_sizes=[256, 256])"),
    ("agent.sac.hidden_sizes[0]=32", "'agent.sac.hidden_sizes[0]=32': agent.sac.hidden_sizes holds a mapping "
                                     "({'0': 32}); expected a list (e.g. agent.sac.hidden_sizes=[256, 256])"),
    ("model.rollout_schedule={}", "'model.rollout_schedule={}': model.rollout_schedule holds a mapping ({}); "
                                  "expected a list (e.g. model.rollout_schedule=[20, 100, 1, 1])"),
    ("env.kwargs=[1,2]", "'env.kwargs=[1,2]': env.kwargs holds a list ([1, 2]); expected a mapping (e.g. "
                         "env.kwargs={name: 1})"),
    ("agent.batch_size={a: 1}", "'agent.batch_size={a: 1}': agent.batch_size holds a mapping ({'a': 1}); expected "
                                "one value"),
    ("checkpoint=[5]", "'checkpoint=[5]': checkpoint is a section of keys, not a list; set its keys "
                       "(checkpoint.<key>=...): every, keep"),
    ("run_dir=None", "'run_dir=None': run_dir is the text 'None'; write null for no value (YAML's None)"),
    ("agent.utd_ratio=None", "'agent.utd_ratio=None': agent.utd_ratio is the text 'None'; write null for no value "
                             "(YAML's None)"),
    ("progress=2", "'progress=2': progress is 2; expected true or false"),
    ("agent.sac.layer_norm=on1", "'agent.sac.layer_norm=on1': agent.sac.layer_norm is 'on1'; expected true or false"),
    ("checkpoint={}", "'checkpoint={}': checkpoint is a section of keys, which cannot be emptied; set the keys you "
                      "mean (checkpoint.<key>=...): every, keep"),
    ("checkpoint=null", "'checkpoint=null': checkpoint is a section of keys, which cannot be emptied; set the keys "
                        "you mean (checkpoint.<key>=...): every, keep"),
    ("agent..batch_size=1", "override 'agent..batch_size=1': its key has an empty part; expected dotted names (e.g. "
                            "agent.batch_size=256)"),
    # a value that cannot be read: one ConfigError naming it, not PyYAML's or OmegaConf's traceback
    ("agent.sac.hidden_sizes=[64,64", "override 'agent.sac.hidden_sizes=[64,64': its value is not valid YAML "
                                      f"(expected ',' or ']', but got '<stream end>' at column 7){NOT_YAML}"),
    ("env.kwargs={a: [1, 2}", f"override 'env.kwargs={{a: [1, 2}}': its value is not valid YAML (expected ',' or "
                              f"']', but got '}}' at column 10){NOT_YAML}"),
    ("env.kwargs.a=!x", "override 'env.kwargs.a=!x': its value is not valid YAML (could not determine a constructor "
                        f"for the tag '!x' at column 1){NOT_YAML}"),
    ("seed=1:30", "config key 'seed': Value '1:30' of type 'str' could not be converted to Integer"),
    ("run_dir=runs/${name}", "config error at 'run_dir': Interpolation key 'name' not found"),
    ("agent.sac.hidden_sizes=256", "'agent.sac.hidden_sizes=256': agent.sac.hidden_sizes holds a value (256); "
                                   "expected a list (e.g. agent.sac.hidden_sizes=[256, 256])"),
    ("model.weight_decay=1e-4", "'model.weight_decay=1e-4': model.weight_decay holds a value (0.0001); expected a "
                                "list (e.g. model.weight_decay=[2.5e-05, 5e-05, 7.5e-05, 7.5e-05, 0.0001])"),
])
def test_an_override_of_the_wrong_shape_is_one_error_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, [override])
    assert str(caught.value) == message


@pytest.mark.parametrize(("text", "message"), [
    ("env: CartPole-v1\n", "env is a section of keys, not a value ('CartPole-v1'); set its keys under it "
                           "(env.<key>): device, factory, id, kwargs, num_envs, source"),
    ("agent:\n- batch_size: 64\n", "agent is a section of keys, not a list ([{'batch_size': 64}]); set its keys "
                                   "under it (agent.<key>): batch_size, buffer_size, compile, dqn, learning_starts, "
                                   "n_step, name, obs_norm, sac, updates_per_vector_step, utd_ratio"),
    ("checkpoint:\n", "checkpoint is empty; set its keys under it (checkpoint.<key>): every, keep"),
    ("env:\n  kwargs: [1, 2]\n", "env.kwargs holds a list ([1, 2]); expected a mapping (e.g. env.kwargs={name: 1})"),
    ("run_dir: None\n", "run_dir is the text 'None'; write null for no value (YAML's None)"),
    ("eval_video: 2\n", "eval_video is 2; expected true or false"),
    ("total_env_steps: 1e6\n", "config key 'total_env_steps': Value '1000000.0' of type 'float' could not be "
                               "converted to Integer (write a whole number as digits: 1000000, not 1e6)"),
])
def test_a_file_of_the_wrong_shape_is_one_error_naming_the_file_and_the_key(
        text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: {message}"


def test_an_unknown_key_names_the_file_of_a_base_chain_it_is_in(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("agent:\n  sac:\n    lr: 0.1\n")
    (tmp_path / "child.yaml").write_text("base: base.yaml\nseed: 3\n")
    with pytest.raises(ConfigError, match=r"^\S*base\.yaml: unknown config key 'agent\.sac\.lr'; known keys under "
                                          r"agent\.sac: actor_lr, "):
        load_config(tmp_path / "child.yaml")


def test_yaml_merge_keys_merge_and_the_mappings_own_keys_win(tmp_path: Path) -> None:
    path = tmp_path / "merged.yaml"
    path.write_text("agent:\n  sac:\n    <<: {actor_lr: 0.001, critic_lr: 0.002}\n    critic_lr: 0.003\n")
    config = load_config(path)
    assert (config.agent.sac.actor_lr, config.agent.sac.critic_lr) == (0.001, 0.003)
    path.write_text("agent:\n  sac:\n    actor_lr: 0.001\n    actor_lr: 0.002\n")  # a repeat is still refused
    with pytest.raises(ConfigError, match="the key 'actor_lr' is given twice"):
        load_config(path)


@pytest.mark.parametrize("text", ["", "# my settings, to come\n"])
def test_a_config_file_with_no_keys_is_refused_and_braces_mean_the_defaults(text: str, tmp_path: Path) -> None:
    """A file saved empty (or the wrong file) trained the schema's defaults without a word."""
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (f"config file {str(path)!r} holds no keys (it is empty, or only comments); expected "
                                 "a mapping of config keys (e.g. 'seed: 0'); write '{}' for the schema's defaults")
    path.write_text("{}\n")
    assert load_config(path) == load_config(None)


def test_the_bool_spellings_omegaconf_reads_still_read_as_before() -> None:
    """run_async.sh installs the video extra for eval_video=1, y, yes or on: each must still turn video on."""
    for word, value in [("1", True), ("y", True), ("yes", True), ("On", True), ("0", False), ("n", False),
                        ("off", False), ("false", False)]:
        assert load_config(None, [f"eval_video={word}"]).eval_video is value, word
