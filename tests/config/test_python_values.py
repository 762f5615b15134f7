"""mbpo.config.check: a Config changed in Python held, in place, to what a config file is held to."""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo.config import ConfigError, check, config_from_yaml, load_config, to_yaml

pytestmark = pytest.mark.timeout(30)
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_passes_as_loaded_and_as_read_back_from_a_checkpoint(path: Path) -> None:
    config = load_config(path, ["run_dir=/tmp/x"])
    check(config)
    check(config_from_yaml(to_yaml(config)))


def test_what_a_config_file_cannot_hold_is_named_before_the_run_writes_it() -> None:
    """A Path in env.kwargs passed the type check as Any and failed when the run wrote its config (a TypeError),
    or wrote a Python tag that resume then refused; a tuple for a list failed inside validation.
    """
    config = load_config(None, ["run_dir=/tmp/x", "env.factory=tests.envs.factories:ours", "env.id=Ours-v0"])
    config.env.kwargs = {"breaks": None, "log": Path("/tmp/log")}
    with pytest.raises(ConfigError, match=r"^env\.kwargs\['log'\]=PosixPath\('/tmp/log'\) is of type "
                                          r"pathlib\.PosixPath; expected what a config file can hold"):
        check(config)
    config = load_config(None, ["run_dir=/tmp/x"])
    config.model.rollout_schedule = (20, 100, 1, 1)  # type: ignore[assignment]
    with pytest.raises(ConfigError, match=r"^model\.rollout_schedule=\(20, 100, 1, 1\) is of type tuple; expected "
                                          r"a list of int$"):
        check(config)


def test_a_path_run_dir_is_taken_as_its_str() -> None:
    config = load_config(None)
    config.run_dir = Path("/tmp/run")  # type: ignore[assignment]
    check(config)
    assert config.run_dir == "/tmp/run"
