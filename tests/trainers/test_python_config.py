"""A Config built or changed in Python is held to what a config file is, on every trainer: a value out of range or
of another type is the ConfigError the file would get, before anything is built or written.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mbpo.config import Config, ConfigError
from mbpo.trainers import make_trainer, trainer_class
from tests.conftest import TRAINER_RUNS
from tests.trainers.test_env_factory import gymnasium_vector_env

pytestmark = pytest.mark.timeout(60)

CHANGES = {
    "gamma": (("agent", "sac", "gamma"), 1.5, r"^agent\.sac\.gamma=1\.5 is out of range; expected a value in \[0, 1\]"),
    "batch_size": (("agent", "batch_size"), 0, r"^agent\.batch_size=0 is out of range"),
    "type": (("total_env_steps",), "many", r"^total_env_steps='many' is of type str; expected int$"),
    "debug": (("debug",), "false", r"^debug='false' is of type str; expected bool$"),  # read before the base's check
    "list": (("agent", "sac", "hidden_sizes"), [64, "64"],
             r"^agent\.sac\.hidden_sizes\[1\]='64' is of type str; expected int$"),
    "numpy": (("agent", "sac", "gamma"), np.float64(0.95),
              r"^agent\.sac\.gamma=np\.float64\(0\.95\) is of type numpy\.float64; expected float$"),
}
"""What a user may set on a loaded Config: before, the first trained on a gamma above 1 (its checkpoint then
refused by resume), the second was a ZeroDivisionError and the third a TypeError, each far from the cause; a
str debug flag ran the async trainer with one collector while its config said it was not in debug mode."""


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_config_changed_in_python_is_checked_as_a_file_is(
        tiny_config: Callable[..., Config], trainer_run: str, change: str) -> None:
    (*path, key), value, message = CHANGES[change]
    cfg = tiny_config(*TRAINER_RUNS[trainer_run])
    section = cfg
    for name in path:
        section = getattr(section, name)
    setattr(section, key, value)
    for build in (make_trainer, trainer_class(cfg)):  # the factory, and the class called directly
        with pytest.raises(ConfigError, match=message):
            build(cfg, cfg.run_dir)
    assert not Path(str(cfg.run_dir)).exists()


def test_a_trainer_owns_a_checked_copy_and_leaves_the_callers_config_as_it_was(
        tiny_config: Callable[..., Config], trainer_run: str) -> None:
    """What the trainer resolves stays out of the caller's object (a sweep reusing one Config kept a learning_starts
    raised for n_step, and the precision ``auto`` resolved to, into its next runs), and what the caller changes
    afterwards stays out of the run (a sweep's next seed changed a built trainer's). A Python value passes as a file's
    would: an int for a float as given, a Path run_dir as its str.
    """
    cfg = tiny_config(*TRAINER_RUNS[trainer_run], "agent.n_step=3", "agent.learning_starts=1",
                      "agent.sac.precision=auto")
    cfg.agent.sac.gamma, cfg.run_dir = 1, Path(str(cfg.run_dir))
    given = copy.deepcopy(cfg)
    for build, run_dir in ((make_trainer, cfg.run_dir), (trainer_class(cfg), cfg.run_dir.with_name("direct"))):
        trainer = build(cfg, run_dir)
        try:
            assert cfg == given
            cfg.seed = 7
            assert trainer.config.seed == given.seed and trainer.config.agent.sac.precision in ("fp32", "bf16")
            assert trainer.config.agent.sac.gamma == 1 and trainer.config.run_dir == str(cfg.run_dir)
            if build is make_trainer:
                assert trainer.config.agent.learning_starts > cfg.agent.learning_starts  # raised for n_step
        finally:
            trainer.close()
        cfg.seed = given.seed


def test_a_trainer_without_a_run_dir_or_with_its_factory_in_the_overrides_place_says_so(
        tiny_config: Callable[..., Config]) -> None:
    cfg = tiny_config("trainer=sync", "run_dir=null")
    with pytest.raises(ConfigError, match=r"^run_dir is None; expected the directory the run writes to"):
        make_trainer(cfg, cfg.run_dir)
    with pytest.raises(TypeError, match=r"third argument is overrides.*env_factory=\.\.\.\)$"):
        make_trainer(cfg, "runs/x", gymnasium_vector_env)  # type: ignore[arg-type]


def test_every_precision_this_machine_cannot_run_is_named_at_once(
        tiny_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch) -> None:
    """An MBPO run whose two ``auto`` precisions became bf16 elsewhere took two failed resumes to learn both keys."""
    import mbpo.device.precision as precision

    monkeypatch.setattr(precision, "native_bf16", lambda device: (False, "no bf16, pretended"))
    cfg = tiny_config("trainer=sync", "model.enabled=true", "agent.sac.precision=bf16", "model.precision=bf16")
    with pytest.raises(ConfigError, match=r"^agent\.sac\.precision=bf16 was requested .*; and model\.precision=bf16 "
                                          r"was requested .*set model\.precision=fp32 or auto"):
        make_trainer(cfg, cfg.run_dir)
    assert not Path(str(cfg.run_dir)).exists()
