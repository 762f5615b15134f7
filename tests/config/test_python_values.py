"""mbpo.config.check: a Config changed in Python held, in place, to what a config file is held to."""

from __future__ import annotations

from pathlib import Path

import pytest

from mbpo.config import ConfigError, check, checked_copy, load_config

pytestmark = pytest.mark.timeout(30)


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


def test_a_path_run_dir_passes_and_the_copy_holds_its_str() -> None:
    config = load_config(None)
    config.run_dir = Path("/tmp/run")  # type: ignore[assignment]
    check(config)
    assert config.run_dir == Path("/tmp/run")  # the caller's object is left as it is
    assert checked_copy(config).run_dir == "/tmp/run"
