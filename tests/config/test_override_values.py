"""How a value is read, in an override or a file: YAML 1.2's scalars (``010`` is ten, ``yes`` is text, no base-60
numbers or dates) and a text key's value as written. A run's stored config reads back as written, ``${`` included.
A value that cannot be read: tests/config/test_shapes.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mbpo.config import config_from_yaml, load_config, to_yaml

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(("override", "key", "expected"), [
    ("seed=010", "seed", 10),  # YAML 1.1: octal 8, the same seed as seed=008
    ("seed=008", "seed", 8),
    ("agent.batch_size=0256", "agent.batch_size", 256),
    ("agent.sac.hidden_sizes=[064,064]", "agent.sac.hidden_sizes", [64, 64]),
    ("agent.batch_size=1_000", "agent.batch_size", 1000),
    ("seed=0x10", "seed", 16),
    ("agent.sac.critic_lr=3e-4", "agent.sac.critic_lr", 3e-4),
    ("agent.sac.critic_lr=.001", "agent.sac.critic_lr", 0.001),
    ("progress=yes", "progress", True),  # a boolean key still takes the words
    ("progress=Off", "progress", False),
    ("run_dir=2025_01_15", "run_dir", "2025_01_15"),  # text keys: as written
    ("run_dir=yes", "run_dir", "yes"),
    ("run_dir=@scratch/run1", "run_dir", "@scratch/run1"),
    ("run_dir=%tmp", "run_dir", "%tmp"),
    ("run_dir='my run'", "run_dir", "my run"),
    ("run_dir=", "run_dir", None),
    ("run_dir=NULL", "run_dir", None),  # every YAML spelling of null is null, a text key's too
    ("env.factory=Null", "env.factory", None),
    ("agent.sac.critic_hidden_sizes=${agent.sac.hidden_sizes}", "agent.sac.critic_hidden_sizes", [256, 256]),
    ("env.id=1:30", "env.id", "1:30"),
    ("env.kwargs={a: 010, b: yes, c: 2025-01-15}", "env.kwargs", {"a": 10, "b": "yes", "c": "2025-01-15"}),
])
def test_an_override_is_read_as_yaml_1_2_and_a_text_key_as_written(override: str, key: str, expected: Any) -> None:
    extra = ["env.factory=tests.envs.factories:ours", "env.id=Mine-v0"] if key == "env.kwargs" else []
    config = load_config("configs/pendulum_sac.yaml", [*extra, override])
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("run_dir", ["2025-01-15", "2025_01_15", "0o17", "010", "1:30", "yes"])
def test_a_file_is_read_as_yaml_1_2_and_its_text_keys_as_written(tmp_path: Path, run_dir: str) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("base: " + str(Path("configs/pendulum_sac.yaml").resolve()) + "\nseed: 010\n"
                    f"run_dir: {run_dir}\nprogress: off\nagent:\n  sac:\n    critic_hidden_sizes: "
                    "${agent.sac.hidden_sizes}\n")
    config = load_config(path)
    assert (config.seed, config.run_dir, config.progress) == (10, run_dir, False)
    assert config.agent.sac.critic_hidden_sizes == config.agent.sac.hidden_sizes
    assert config_from_yaml(to_yaml(config)) == config  # and a run's stored config reads back the same


def test_a_stored_config_reads_back_as_written_an_escaped_reference_included(tmp_path: Path) -> None:
    r"""``run_dir=lit_\${x}`` names a folder ``lit_${x}``: its config.yaml held that text, which resume, eval and
    plot then read as a reference to a key x, and the run could not be used again.
    """
    config = load_config(None, [f"run_dir={tmp_path}/lit_\\${{x}}"])
    assert config.run_dir == f"{tmp_path}/lit_${{x}}"
    again = config_from_yaml(to_yaml(config))
    assert again == config


def test_text_that_reads_as_a_number_is_stored_quoted_wherever_it_is() -> None:
    """An ``env.kwargs`` value is no text key: '0o17' was stored unquoted and read back as 15 by resume and eval,
    while the run had trained with '0o17'.
    """
    config = load_config(None, ["env.id=Mine-v0", "env.factory=tests.envs.factories:ours",
                                "env.kwargs={tag: '0o17', day: '2025_01_15', flag: 'yes', n: 3}"])
    assert config.env.kwargs == {"tag": "0o17", "day": "2025_01_15", "flag": "yes", "n": 3}
    assert config_from_yaml(to_yaml(config)) == config
