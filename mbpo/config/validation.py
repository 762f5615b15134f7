"""Config validation: choices, ranges, finiteness and budgets (mbpo.config.budgets), on top of the schema's types.

OmegaConf rejects unknown keys and wrong types while loading; this module checks what types cannot say.
Every float value (list elements and non-null Optional floats included) must be finite, and a run whose
budget can never be met (updates, env steps, model rollouts or a model buffer beyond what any machine can
do) is refused with the arithmetic that shows it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator
from typing import Any

from mbpo.config.budgets import check_budgets
from mbpo.config.schema import LEARNER, AgentConfig, Config, ConfigError, resolve_type

__all__ = ["validate", "CALLABLE_PATH", "MAX_ENV_ID_CHARS", "learner_keys"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "model.activation": ("swish", "relu"),
    "agent.name": ("sac", "dqn"),
    "env.source": ("auto", "native", "gymnasium"),
    "agent.sac.precision": ("fp32", "bf16", "auto"),
    "agent.sac.actor_q": ("min", "mean"),
    "agent.sac.weight_init": ("default", "xavier", "lecun"),
    "agent.sac.reset_layers": ("all", "last"),
    "model.precision": ("fp32", "bf16", "auto"),
    "model.fit_baseline": ("new_fit", "pre_fit"),
    "model.lookahead.value": ("first", "actor"),
    "trainer": ("async", "sync"),
    "runtime.queue_full": ("block", "drop_oldest"),
    "runtime.backend": ("thread", "process", "ray"),
    "runtime.nonfinite": ("raise", "drop"),
}
DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
"""What a device key or ``--device`` accepts."""
CALLABLE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
"""A callable named by ``package.module:attr`` (``attr`` may be dotted: ``module:Class.method``); mbpo.config.callables
loads it."""
_CALLABLE_KEYS = ("model.termination", "model.reward")
# Float keys that may hold nan or inf; each must say so (and what it means) in its docstring. None today.
_NONFINITE_OK: frozenset[str] = frozenset()

MAX_ENV_ID_CHARS = 100
"""Longest env.id: it names the run dir (runs/<env.id>-<agent>-s<seed>-<date>-<time>-<pid>, up to 70 characters
more), and a file name holds at most 255 bytes; registered ids are under 50 characters."""
# key -> (low, high, low inclusive); None = unbounded on that side. High is inclusive unless in _HIGH_EXCLUSIVE.
_RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "seed": (0, 2**64 - 1, True),  # numpy's SeedSequence takes any int >= 0, torch.manual_seed at most 2**64 - 1
    "total_env_steps": (1, None, True),
    "eval_every": (1, None, True),
    "eval_episodes": (1, None, True),
    "log_every": (1, None, True),
    "torch_threads": (1, None, True),
    "env.num_envs": (1, None, True),
    "agent.batch_size": (1, None, True),
    "agent.utd_ratio": (0, None, False),
    "agent.updates_per_vector_step": (0, None, False),
    "agent.n_step": (1, 100, True),
    "agent.learning_starts": (0, None, True),
    "agent.buffer_size": (1, None, True),
    "agent.sac.actor_lr": (0, None, False),
    "agent.sac.critic_lr": (0, None, False),
    "agent.sac.alpha_lr": (0, None, False),
    "agent.sac.init_alpha": (0, None, False),
    "agent.sac.gamma": (0, 1, True),
    "agent.sac.tau": (0, 1, False),
    "agent.sac.max_grad_norm": (0, None, True),
    "agent.sac.dropout": (0, 1, True),
    "agent.sac.num_critics": (1, None, True),
    "agent.sac.num_min": (1, None, True),
    "agent.sac.renorm_warmup": (0, None, True),
    "agent.sac.policy_delay": (1, None, True),
    "agent.sac.adam_beta1": (0, 1, True),
    "agent.sac.alpha_adam_beta1": (0, 1, True),
    "agent.sac.reset_every": (0, None, True),
    "agent.dqn.lr": (0, None, False),
    "agent.dqn.gamma": (0, 1, True),
    "agent.dqn.target_update_interval": (1, None, True),
    "agent.dqn.epsilon_start": (0, 1, True),
    "agent.dqn.epsilon_end": (0, 1, True),
    "agent.dqn.epsilon_decay_updates": (1, None, True),
    "agent.dqn.max_grad_norm": (0, None, True),
    "model.ensemble_size": (1, None, True),
    "model.num_elites": (1, None, True),
    "model.lr": (0, None, False),
    "model.logvar_bound_penalty": (0, None, True),
    "model.nll_beta": (0, 1, True),
    "model.batch_size": (1, None, True),
    "model.holdout_ratio": (0, 1, False),
    "model.max_holdout": (1, None, True),
    "model.patience": (1, None, True),
    "model.max_epochs": (0, None, True),
    "model.max_grad_steps": (0, None, True),
    "model.train_freq": (1, None, True),
    "model.rollouts_per_real": (0, None, True),
    "model.rollouts_per_vector_step": (0, None, True),
    "model.epoch_length": (1, None, True),
    "model.retain_epochs": (1, None, True),
    "model.real_ratio": (0, 1, True),
    "model.rollout_keep_fraction": (0, 1, False),
    "model.macura_quantile": (0, 1, True),
    "model.macura_scale": (0, None, False),
    "model.macura_history": (1, None, True),
    "model.rollout_batch_size": (1, None, True),
    "model.rollout_start_window": (0, None, True),
    "model.max_lag": (1, None, True),
    "model.rollout_n_step": (1, 100, True),
    "model.lookahead.horizon": (1, 100, True),
    "model.lookahead.sequences": (1, None, True),
    "model.lookahead.actor_sequences": (0, None, True),
    "model.lookahead.particles": (1, None, True),
    "model.lookahead.iterations": (1, None, True),
    "model.lookahead.kappa": (0, None, False),
    "model.lookahead.var_keep": (0, 1, True),
    "checkpoint.every": (1, None, True),
    "checkpoint.keep": (1, None, True),
    "runtime.num_collectors": (1, None, True),
    "runtime.collection_batch_size": (1, None, True),
    "runtime.max_queue_size": (1, None, True),
    "runtime.publish_every": (1, None, True),
    "runtime.ratio_tolerance": (0, None, False),
    "runtime.max_lead": (0, None, True),
    "runtime.collector_timeout_s": (0, None, False),
    "runtime.max_restarts": (0, None, True),
    "runtime.shutdown_timeout_s": (0, None, False),
    "runtime.learner_threads": (1, None, True),
    "runtime.model_threads": (1, None, True),
    "runtime.collector_threads": (1, None, True),
    "runtime.ray.num_cpus_per_collector": (0, None, True),
    "runtime.ray.num_gpus_per_collector": (0, None, True),
}
_HIGH_EXCLUSIVE = {
    "agent.sac.dropout": "a dropout of 1 drops every unit",
    "agent.sac.adam_beta1": "Adam with beta1 = 1 never moves its first moment",
    "agent.sac.alpha_adam_beta1": "Adam with beta1 = 1 never moves its first moment",
    "model.holdout_ratio": "some real data must remain to train on",
}
"""Keys of _RANGES whose upper bound is itself refused, and why (said in the message)."""


def _get(config: Config, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def validate(config: Config) -> None:
    """Raise :class:`ConfigError` naming the first key whose value is not allowed, and what is expected."""
    for key, allowed in _CHOICES.items():
        if _get(config, key) not in allowed:
            raise ConfigError(f"{key}={_get(config, key)!r} is not allowed; expected one of {', '.join(allowed)}")
    _check_finite(config)
    if not DEVICE_PATTERN.match(config.device):
        raise ConfigError(f"device={config.device!r} is not allowed; expected auto, cpu, cuda or cuda:N")
    if config.env.device is not None and not DEVICE_PATTERN.match(config.env.device):
        raise ConfigError(f"env.device={config.env.device!r} is not allowed; expected null, auto, cpu, cuda or cuda:N")
    _check_env(config)
    ray = config.runtime.ray
    if ray.env_device is not None and not re.match(r"^(cpu|cuda(:\d+)?)$", ray.env_device):
        raise ConfigError(f"runtime.ray.env_device={ray.env_device!r} is not allowed; "
                          "expected null, cpu, cuda or cuda:N")
    if ray.num_cpus is not None and not ray.num_cpus > 0:
        raise ConfigError(f"runtime.ray.num_cpus={ray.num_cpus!r} is out of range; expected null or a value > 0")
    if ray.address is not None and not (ray.address == "auto" or re.match(r"^(ray://)?[\w.\-]+:\d+$", ray.address)):
        raise ConfigError(f"runtime.ray.address={ray.address!r} is not allowed; expected null (a private local Ray), "
                          "auto (the cluster this machine belongs to) or ray://host:port")
    for key, (low, high, low_inclusive) in _RANGES.items():
        value = _get(config, key)
        if value is None:  # an optional key left unset
            continue
        # Written so that every comparison with NaN fails the check instead of passing it.
        above_low = low is None or (value >= low if low_inclusive else value > low)
        below_high = high is None or (value < high if key in _HIGH_EXCLUSIVE else value <= high)
        if not (above_low and below_high):
            why = f": {_HIGH_EXCLUSIVE[key]}" if key in _HIGH_EXCLUSIVE else ""
            raise ConfigError(f"{key}={value!r} is out of range; expected a value in {_interval(key)}{why}")
    for per, per_vector, what in (("agent.utd_ratio", "agent.updates_per_vector_step", "updates"),
                                  ("model.rollouts_per_real", "model.rollouts_per_vector_step", "rollouts")):
        if _get(config, per) is not None and _get(config, per_vector) is not None:
            raise ConfigError(f"{per}={_get(config, per)} and {per_vector}={_get(config, per_vector)} both set the "
                              f"{what} budget; set one of the two, the other null (to use {per_vector} over a config "
                              f"that sets {per}, add {per}=null)")
    _check_learner_keys(config)
    _check_critic(config)
    if config.model.enabled and config.model.rollout_n_step > 1 and config.agent.name != "sac":
        raise ConfigError(f"model.rollout_n_step={config.model.rollout_n_step} with agent.name="
                          f"{config.agent.name}: n-step model transitions need SAC, whose update reads each row's "
                          "discount; use model.rollout_n_step=1 or agent.name=sac")
    for key in _CALLABLE_KEYS:
        path = _get(config, key)
        if path is not None and not CALLABLE_PATH.match(path):
            raise ConfigError(f"{key}={path!r} is not a callable's path; expected null or 'package.module:callable'")
    if config.model.termination is not None and config.model.learned_termination:
        raise ConfigError(f"model.termination={config.model.termination!r} and model.learned_termination=true ask "
                          "for both a given and a learned termination; set one of the two")
    if config.model.num_elites > config.model.ensemble_size:
        raise ConfigError(f"model.num_elites={config.model.num_elites} is out of range; expected at most "
                          f"model.ensemble_size={config.model.ensemble_size}")
    m = config.model
    if m.enabled and m.rollout_keep_fraction < 1 and m.num_elites < 2:
        raise ConfigError(f"model.rollout_keep_fraction={m.rollout_keep_fraction} ranks branches by how much the "
                          f"elites disagree, which needs model.num_elites >= 2 (it is {m.num_elites}); raise "
                          "num_elites or set rollout_keep_fraction=1.0")
    if not all(w >= 0 for w in m.weight_decay):
        raise ConfigError(f"model.weight_decay={m.weight_decay!r} is not allowed; expected {len(m.hidden_sizes) + 1} "
                          "non-negative values (one per hidden layer plus the output)")
    if len(m.weight_decay) != len(m.hidden_sizes) + 1:  # resizing the model leaves the file's per-layer decays
        fit = [*m.weight_decay[:len(m.hidden_sizes)], *m.weight_decay[len(m.weight_decay) - 1:]]
        fit += [fit[-1]] * (len(m.hidden_sizes) + 1 - len(fit))
        raise ConfigError(f"model.hidden_sizes={m.hidden_sizes!r} has {len(m.hidden_sizes)} hidden layers, so "
                          f"model.weight_decay takes {len(m.hidden_sizes) + 1} values (one per hidden layer plus the "
                          f"output), not the {len(m.weight_decay)} of {m.weight_decay!r}; set it with the model's "
                          f"size, e.g. model.weight_decay=[{','.join(f'{w:g}' for w in fit)}]")
    s0, s1, l0, l1 = (m.rollout_schedule + [0, 0, 0, 0])[:4]
    if len(m.rollout_schedule) != 4 or s1 < s0 or l0 < 1 or l1 < 1:
        raise ConfigError(f"model.rollout_schedule={m.rollout_schedule!r} is not allowed; expected "
                          "[start_epoch, end_epoch, start_len, end_len] with end_epoch >= start_epoch and lengths >= 1")
    if m.enabled and m.rollout_n_step > 1 and max(l0, l1) < 2:
        raise ConfigError(f"model.rollout_n_step={m.rollout_n_step} sums each branch's rewards over up to that many "
                          f"steps, but model.rollout_schedule={m.rollout_schedule!r} keeps every branch 1 step long, "
                          "so every row stays 1-step; give the branches a longer length (e.g. rollout_schedule=[0,0,"
                          f"{m.rollout_n_step},{m.rollout_n_step}]) or set model.rollout_n_step=1")
    if m.enabled and m.macura:
        _check_macura(config)
    if m.lookahead.enabled:
        _check_lookahead(config)
    for key in ("agent.sac.hidden_sizes", "agent.sac.critic_hidden_sizes", "agent.dqn.hidden_sizes",
                "model.hidden_sizes"):
        sizes = _get(config, key)
        if sizes is None and key == "agent.sac.critic_hidden_sizes":
            continue
        if not sizes or any(s < 1 for s in sizes):
            raise ConfigError(f"{key}={sizes!r} is not allowed; expected a non-empty list of positive ints")
    check_budgets(config)


def _check_macura(config: Config) -> None:
    """model.macura=true: the keys that contradict it (one line each)."""
    m = config.model
    if m.rollout_keep_fraction < 1:
        raise ConfigError(f"model.macura=true and model.rollout_keep_fraction={m.rollout_keep_fraction} both end "
                          "branches by the elites' disagreement (MACURA's threshold, M2AC's fraction); set one of "
                          "the two: rollout_keep_fraction=1.0 or macura=false")
    if m.num_elites < 2:
        raise ConfigError(f"model.macura=true measures how much the elites disagree, which needs "
                          f"model.num_elites >= 2 (it is {m.num_elites}); raise num_elites or set macura=false")
    if max(m.rollout_schedule[2:]) < 2:
        raise ConfigError(f"model.macura=true adapts each branch's length up to model.rollout_schedule's, which is "
                          f"1 throughout ({m.rollout_schedule!r}); give it a longer length, e.g. "
                          "rollout_schedule=[0,0,10,10] (the MACURA paper's 10), or set macura=false")


def _check_lookahead(config: Config) -> None:
    """model.lookahead.enabled: it plans through the ensemble with SAC's critics."""
    if not config.model.enabled:
        raise ConfigError("model.lookahead.enabled=true plans through the dynamics ensemble, which needs "
                          "model.enabled=true; enable the model or set model.lookahead.enabled=false")
    if config.agent.name != "sac":
        raise ConfigError(f"model.lookahead.enabled=true plans continuous actions with SAC's critics; agent.name is "
                          f"{config.agent.name!r}: use agent.name=sac or set model.lookahead.enabled=false")


def learner_keys() -> dict[str, tuple[str, Any]]:
    """``{dotted key: (the agent.name it is for, its default)}`` of every key that only one learner uses: each key
    of a learner's section (AgentConfig's dataclass fields, named as the learner: agent.sac.*, agent.dqn.*) and
    each AgentConfig key marked with that learner in its field metadata (schema.LEARNER). Read from the schema, so
    a key added there is covered.
    """
    out: dict[str, tuple[str, Any]] = {}
    defaults = AgentConfig()
    for f in dataclasses.fields(AgentConfig):
        section = resolve_type(f.type)
        if section is not None:
            instance = getattr(defaults, f.name)
            out |= {f"agent.{f.name}.{g.name}": (f.name, getattr(instance, g.name))
                    for g in dataclasses.fields(section)}
        elif LEARNER in f.metadata:
            out[f"agent.{f.name}"] = (f.metadata[LEARNER], getattr(defaults, f.name))
    return out


def _check_learner_keys(config: Config) -> None:
    """A key of another learner (agent.sac.crossq=true with agent.name=dqn) would be silently ignored: refuse any
    such key set off its default, in a file or an override.
    """
    name = config.agent.name
    for key, (learner, default) in learner_keys().items():
        value = _get(config, key)
        if learner != name and value != default:
            raise ConfigError(f"{key}={_shown(value)} is for agent.name={learner}, and this run's agent.name={name} "
                              f"does not use it; drop it (its default is {_shown(default)}) or set "
                              f"agent.name={learner}")


def _shown(value: Any) -> str:
    """A value as it is written in YAML or an override: true, null, [256, 256], 0.5, bf16."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def _check_critic(config: Config) -> None:
    """The SAC critic options that contradict each other (mbpo.agents.sac_loss says what each does)."""
    sac = config.agent.sac
    if sac.num_min is not None and sac.num_min > sac.num_critics:
        raise ConfigError(f"agent.sac.num_min={sac.num_min} is out of range; the target's minimum is over a subset of "
                          f"the critics, so expected at most agent.sac.num_critics={sac.num_critics}")
    if sac.crossq and sac.tau is not None:
        raise ConfigError(f"agent.sac.tau={sac.tau} with agent.sac.crossq=true: CrossQ has no target critics to "
                          "update; leave agent.sac.tau unset (null)")
    if sac.reset_layers != "all" and sac.reset_every == 0:
        raise ConfigError(f"agent.sac.reset_layers={sac.reset_layers} with agent.sac.reset_every=0: no reset happens; "
                          "set agent.sac.reset_every to the updates between resets, or drop reset_layers")


_PASSED_TO_FACTORY = {"num_envs": "env.num_envs", "device": "env.device (or device)", "seed": "the run's seed"}


def _check_env(config: Config) -> None:
    """One way of naming the env: env.id builds it, or env.factory does and env.id is only the run's label."""
    env = config.env
    if len(env.id) > MAX_ENV_ID_CHARS:
        raise ConfigError(f"env.id={env.id[:40]!r}... is {len(env.id)} characters long; expected at most "
                          f"{MAX_ENV_ID_CHARS}: it names the run dir, and a file name holds at most 255 bytes")
    if env.factory is None:
        if env.kwargs:
            raise ConfigError(f"env.kwargs={env.kwargs!r} is for env.factory (keyword arguments of its callable), "
                              "which is not set; set env.factory=package.module:callable or drop env.kwargs")
        return
    from envs.factory import FACTORY_PATH

    if not FACTORY_PATH.match(env.factory):
        raise ConfigError(f"env.factory={env.factory!r} is not allowed; expected \"package.module:callable\" "
                          "(e.g. examples.point_reach:make_env)")
    reserved = sorted(set(env.kwargs) & set(_PASSED_TO_FACTORY))
    if reserved:
        raise ConfigError(f"env.kwargs.{reserved[0]} is not allowed: the factory's {reserved[0]} is passed from "
                          f"{_PASSED_TO_FACTORY[reserved[0]]}")
    if env.source != "auto":
        raise ConfigError(f"env.source={env.source!r} picks the implementation of a built-in env.id and does not "
                          "apply with env.factory; drop it (keep env.source=auto)")
    if _builds(env.id):
        raise ConfigError(f"env.id={env.id!r} names a built-in env, but env.factory={env.factory!r} builds this "
                          "run's; with env.factory, env.id is the run's label: set a name of your own (e.g. "
                          "env.id=MyTask-v0), or drop env.factory to train the built-in env")


def _builds(env_id: str) -> bool:
    """Whether ``envs.make`` would build ``env_id`` (a native id, an ``Mjlab-`` task or a gymnasium id)."""
    import gymnasium as gym

    import envs

    return env_id in envs.list_envs(include_toy=True) or env_id.startswith("Mjlab-") or env_id in gym.registry


def _interval(key: str) -> str:
    """``_RANGES[key]`` as an interval, e.g. ``[0, 1]`` or ``(0, inf)`` (infinity itself is never allowed)."""
    low, high, low_inclusive = _RANGES[key]
    left = "(-inf" if low is None else f"{'[' if low_inclusive else '('}{low}"
    right = "inf)" if high is None else f"{high})" if key in _HIGH_EXCLUSIVE else f"{high}]"
    return f"{left}, {right}"


def _float_values(obj: Any, prefix: str = "") -> Iterator[tuple[str, str, float, bool]]:
    """``(dotted key, element key, value, optional)`` for every float in the config, found by walking the
    dataclass fields, so a float key added later is covered; a list element's key is ``key[i]``.
    """
    for f in dataclasses.fields(obj):
        key, value = prefix + f.name, getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _float_values(value, key + ".")
        elif isinstance(value, float):
            yield key, key, value, _admits_none(f.type)
        elif isinstance(value, (list, tuple)):
            yield from ((key, f"{key}[{i}]", v, False) for i, v in enumerate(value) if isinstance(v, float))


def _admits_none(annotation: object) -> bool:
    """Whether a field's annotation, as written (a string here), allows None: ``X | None`` or ``Optional[X]``."""
    text = str(annotation)
    return "None" in text or "Optional" in text


def _check_finite(config: Config) -> None:
    """nan and inf pass every ``<`` check (NaN compares False) and then break the run; refuse them up front."""
    for key, where, value, optional in _float_values(config):
        if math.isfinite(value) or key in _NONFINITE_OK:
            continue
        if key in _RANGES:
            expected = f"a value in {_interval(key)}"
        elif where != key:
            expected = f"finite numbers in {key}={_get(config, key)!r}"
        else:
            expected = "a finite number or null" if optional else "a finite number"
        raise ConfigError(f"{where}={value!r} is not a finite number; expected {expected}")
