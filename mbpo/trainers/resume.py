"""Resuming a run: choose its newest loadable checkpoint, check it belongs to the run dir, and decide
the config it resumes with (only run length, cadence, the non-finite rule, debug mode, the precisions and the
device may change).
"""

from __future__ import annotations

import difflib
import shlex
import sys
from pathlib import Path
from typing import Any

from mbpo.config import Config, ConfigError, config_from_yaml, describe
from mbpo.config.unread import note_unread_overrides
from mbpo.config.validation import learner_keys
from mbpo.errors import MbpoError
from mbpo.run.checkpoint import corrupt_checkpoints, list_checkpoints, load_latest
from mbpo.run.run_dir import RESUMABLE_OVERRIDES, check_belongs, check_is_run_dir
from mbpo.runtime.env_builder import env_label, factory_name

__all__ = ["RunAlreadyDone", "ResumePoint", "load_for_resume", "keys_newer_than", "check_same_env_factory"]


class RunAlreadyDone(MbpoError):
    """Resume of a run that has already reached its ``total_env_steps``: nothing to do, nothing written."""


class ResumePoint:
    """A checkpoint chosen to resume from, checked against its run dir, with the config it resumes with."""

    def __init__(self, run_dir: Path, path: Path, state: dict[str, Any], config: Config, overrides: list[str]):
        self.run_dir, self.path, self.state, self.config, self.overrides = run_dir, path, state, config, overrides


def load_for_resume(run_dir: str | Path, overrides: list[str] | None = None, trust: bool = False,
                    debug: bool | None = None) -> ResumePoint:
    """Load the newest checkpoint of ``run_dir`` once and check it: it must be this run's (identity, env
    steps against its name), the overrides may only change run length and cadence, and there must be
    something left to do: steps to take, or the updates an async run's stop after its last step left owed
    (a shorter ``total_env_steps`` than already reached is refused). ``debug`` (the command line's
    ``--debug``, None: as the run was) sets debug mode unless an override does; a change is logged as one.
    """
    run_dir, overrides = Path(run_dir).expanduser(), list(overrides or [])
    known = [key for key, _, _ in describe()]
    for item in overrides:
        key = item.split("=", 1)[0]
        if not any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in known):
            close = difflib.get_close_matches(key, [*known, *RESUMABLE_OVERRIDES], n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r}{hint}; keys a resume may change: "
                              f"{', '.join(RESUMABLE_OVERRIDES)}")
        if not any(key == k or key.startswith(k + ".") for k in RESUMABLE_OVERRIDES):
            raise ConfigError(f"{key!r} cannot change when resuming (the checkpoint was built with it); "
                              f"keys that can: {', '.join(RESUMABLE_OVERRIDES)}")
    check_is_run_dir(run_dir)
    checkpoints = run_dir / "checkpoints"
    never_saved = not list_checkpoints(checkpoints) and not corrupt_checkpoints(checkpoints)
    if never_saved and (run_dir / "config.yaml").is_file():
        raise MbpoError(f"{run_dir} holds a run that stopped before its first checkpoint, so there is nothing to "
                        f"resume; train it again with run_dir=<new dir> (its config: {run_dir / 'config.yaml'})")
    path, state = load_latest(checkpoints, trust=trust)
    check_belongs(run_dir, path, state)
    trained = config_from_yaml(state["config"]).agent.name
    for item in overrides:  # validation's own advice would be to set agent.name, which no resume can
        learner = learner_keys().get(item.split("=", 1)[0], (trained,))[0]
        if learner != trained:
            raise ConfigError(f"{item.split('=', 1)[0]} is for agent.name={learner}, and {run_dir} trains "
                              f"agent.name={trained}, which a resume keeps; drop {item}")
    config = config_from_yaml(state["config"], overrides)
    note_unread_overrides(config, overrides)  # model.precision=bf16 on a run without the model, say
    config.run_dir = str(run_dir)
    explicit = any(item.split("=", 1)[0] == "debug" for item in overrides)
    if debug is not None and not explicit and config.debug != debug:
        config.debug = debug
        overrides.append(f"debug={str(debug).lower()}")
        print(f"[mbpo] debug mode {'on' if debug else 'off'} from here (the run so far: "
              f"{'on' if not debug else 'off'})", file=sys.stderr)
    steps = int(state["trainer"]["env_steps"])
    if config.total_env_steps < steps:
        raise ConfigError(f"total_env_steps={config.total_env_steps} is below the {steps} env steps {run_dir} has "
                          f"already taken; expected total_env_steps > {steps} to train longer")
    owed = bool(state["trainer"].get("work_owed", False))  # older checkpoints: done at total_env_steps
    if steps >= config.total_env_steps and not owed:
        raise RunAlreadyDone(f"{run_dir} is already done ({steps} of total_env_steps={config.total_env_steps} env "
                             f"steps); nothing was written. To train longer: python -m mbpo resume "
                             f"{shlex.quote(str(run_dir))} total_env_steps=<more than {steps}>")
    if steps >= config.total_env_steps:
        print(f"[mbpo] {run_dir} took its {steps} env steps but was stopped before the work they earned was done "
              "(the learner's last updates, a model fit, the final evaluation); resuming finishes it", file=sys.stderr)
    newer = keys_newer_than(state["config"])
    if newer:
        print(f"[mbpo] note: {run_dir}'s config predates {', '.join(newer)}; "
              "the resumed run takes today's defaults for them (python -m mbpo --help-config says what each does)",
              file=sys.stderr)
    return ResumePoint(run_dir, path, state, config, overrides)


def keys_newer_than(stored_yaml: str) -> list[str]:
    """The config keys of today's schema that a stored config (a checkpoint's YAML) does not mention."""
    import yaml

    present: set[str] = set()

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                present.add(prefix + str(key))
                walk(value, f"{prefix}{key}.")

    walk(yaml.safe_load(stored_yaml) or {}, "")
    return [key for key, _, _ in describe() if key not in present]


def check_same_env_factory(point: ResumePoint, env_factory: Any) -> None:
    """A run trained on a Python ``env_factory``'s envs goes on with one, and a run trained on the config's env
    without one: the config's env id may name the same task, so nothing else would stop a resume that trains
    on other envs than the run's first part did. A factory by another name (renamed, moved) is one line. A
    checkpoint that records neither (written before checkpoints said) resumes as asked.
    """
    if "env_factory" not in point.state:
        return
    trained = point.state["env_factory"]
    given = None if env_factory is None else factory_name(env_factory)
    if trained is not None and given is None:
        raise ConfigError(f"{point.run_dir} trained on the envs of env_factory {trained}, passed from Python; "
                          f"expected that factory to resume it, got none (the run would build "
                          f"{env_label(point.config.env)} instead): resume it from Python with the factory it trained "
                          "with, mbpo.trainers.resume_trainer(run_dir, env_factory=...)")
    if trained is None and given is not None:
        raise ConfigError(f"{point.run_dir} trained on {env_label(point.config.env)}, built from its config; "
                          f"expected no env_factory to resume it, got {given}: resume it without one (a run "
                          "goes on with the envs it trained on)")
    if trained != given:
        print(f"[mbpo] resuming {point.run_dir} with env_factory {given}; it trained with {trained}",
              file=sys.stderr)
