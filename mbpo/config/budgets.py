"""Budgets: a run that can never finish (updates, env steps, model rollouts or a model buffer beyond what any
machine can do) is refused with the arithmetic that shows it.

A config is refused when even these optimistic numbers cannot finish it in MAX_RUN_DAYS: they are upper bounds of
what any machine does today, so no run that could finish is refused.
"""

from __future__ import annotations

import math
import re

from mbpo.config.schema import Config, ConfigError, rollouts_per_transition, updates_per_transition

__all__ = ["check_budgets", "MAX_RUN_DAYS", "MAX_UTD_RATIO", "MAX_MODEL_BUFFER_TRANSITIONS"]

MAX_RUN_DAYS = 30
"""Longest run a config may ask for; past a month a config is a typo, not a plan."""
OPTIMISTIC_UPDATES_PER_S = 20_000
"""Gradient updates per second of a small-net, fused (CUDA-graph) SAC/DQN update on a big GPU: an upper
bound; typical runs do 100-3,000."""
MAX_UTD_RATIO = 1_000
"""Largest agent.utd_ratio: published recipes use 1-20 (SAC 1, MBPO 20-40, REDQ/DroQ 20), so 1,000
updates per transition is already 25x the largest and anything above is a typo (e.g. a total count)."""
OPTIMISTIC_ENV_STEPS_PER_S = 100_000_000
"""Env transitions per second: GPU simulators reach 1e6-1e7 on simple tasks, so 1e8 is an upper bound."""
OPTIMISTIC_MODEL_STEPS_PER_S = 100_000_000
"""Branched-rollout steps per second: an ensemble forward of the default 4x200 MLPs costs about 2 MFLOP per
transition over 7 members (HalfCheetah), so 1e8 steps/s would be ~200 TFLOP/s, 3x an H100's fp32 peak."""
MAX_MODEL_BUFFER_TRANSITIONS = 2_000_000_000
"""Largest model buffer: it is allocated in one piece at the first rollout, and a transition (obs, action,
reward, next obs, terminated in float32) is at least 36 bytes (Pendulum), 168 for HalfCheetah, so 2e9 is
72-336 GB, more than any GPU holds; MBPO's own configs need at most about 1e7."""


def _num(x: float) -> str:
    """A number for the arithmetic in a message: 19000, 0.5, 1e9, 1.9e13."""
    if float(x).is_integer() and abs(x) < 1e7:
        return str(int(x))
    return re.sub(r"e\+?(-?)0*(?=\d)", r"e\1", f"{x:.6g}")


def _floor3(x: float) -> float:
    """``x`` rounded down to 3 significant digits, so a printed limit is itself accepted."""
    if x <= 0:
        return 0.0
    scale = 10.0 ** (math.floor(math.log10(x)) - 2)
    return math.floor(x / scale) * scale


def _too_long(amount: float, per_s: int, what: str) -> str | None:
    """``"at an optimistic R what/s that is T, more than the 30-day limit"``, or None when it fits."""
    seconds = amount / per_s
    if seconds <= MAX_RUN_DAYS * 86_400:
        return None
    days, years = seconds / 86_400, seconds / (365 * 86_400)
    if days < 730:
        took = f"{days:,.0f} days"
    else:
        took = f"{years:,.0f} years" if years < 1e6 else f"{_num(years)} years"
    rate = f"{per_s:,}" if per_s < 1e7 else _num(per_s)
    return f"at an optimistic {rate} {what}/s that is {took}, more than the {MAX_RUN_DAYS}-day limit"


def _budget_key(per_transition: float | None, per_vector_step: float | None, keys: tuple[str, str],
                num_envs: int) -> tuple[str, int]:
    """The key a config sets a budget with (the per-transition one unless only the per-vector-step one is set),
    and how many of the per-transition unit one of it is: a message names the user's own key, in its own unit.
    """
    return (keys[1], num_envs) if per_transition is None and per_vector_step is not None else (keys[0], 1)


def check_budgets(config: Config) -> None:
    """Refuse a run that can never finish, showing the arithmetic (the constants above say why the numbers)."""
    steps = config.total_env_steps
    too_long = _too_long(steps, OPTIMISTIC_ENV_STEPS_PER_S, "env steps")
    if too_long:
        fits = _floor3(OPTIMISTIC_ENV_STEPS_PER_S * MAX_RUN_DAYS * 86_400)
        raise ConfigError(f"total_env_steps={_num(steps)}: {too_long}; expected total_env_steps <= {_num(fits)}")

    a = config.agent
    utd = updates_per_transition(config)
    key, unit = _budget_key(a.utd_ratio, a.updates_per_vector_step,
                            ("agent.utd_ratio", "agent.updates_per_vector_step"), config.env.num_envs)
    per_step = "" if unit == 1 else f" ({_num(utd)} per transition at env.num_envs={unit})"
    learning = max(steps - a.learning_starts, 0)
    updates = learning * utd
    too_long = _too_long(updates, OPTIMISTIC_UPDATES_PER_S, "updates")
    if too_long:
        fits = _floor3(OPTIMISTIC_UPDATES_PER_S * MAX_RUN_DAYS * 86_400 / learning)
        cap = "" if fits <= MAX_UTD_RATIO else f" (the time limit alone allows {_num(fits * unit)}, but no recipe " \
            f"uses more than {MAX_UTD_RATIO:,} per transition)"
        raise ConfigError(
            f"{key}={_num(utd * unit)}{per_step} asks for (total_env_steps - agent.learning_starts) x updates per "
            f"transition = ({_num(steps)} - {_num(a.learning_starts)}) x {_num(utd)} = {_num(updates)} gradient "
            f"updates; {too_long}; expected {key} <= {_num(_floor3(min(fits, MAX_UTD_RATIO) * unit))}{cap}, "
            "or fewer total_env_steps")
    if utd > MAX_UTD_RATIO:
        raise ConfigError(
            f"{key}={_num(utd * unit)}{per_step} is more than {MAX_UTD_RATIO:,} gradient updates per env transition; "
            "published recipes use 1-20 (REDQ/DroQ 20), so this is a typo (a total count rather than a ratio?); "
            f"expected {key} <= {_num(MAX_UTD_RATIO * unit)}")

    m = config.model
    if not m.enabled:
        return
    longest = max(m.rollout_schedule[2], m.rollout_schedule[3])  # the schedule's longer end
    per_real = rollouts_per_transition(config)
    key, unit = _budget_key(m.rollouts_per_real, m.rollouts_per_vector_step,
                            ("model.rollouts_per_real", "model.rollouts_per_vector_step"), config.env.num_envs)
    per_step = "" if unit == 1 else f" ({_num(per_real)} per real transition at env.num_envs={unit})"
    given = (f"{key}={_num(per_real * unit)}{per_step} with a longest rollout of {longest} "
             f"(model.rollout_schedule={m.rollout_schedule})")
    rollout_steps = steps * per_real * longest
    too_long = _too_long(rollout_steps, OPTIMISTIC_MODEL_STEPS_PER_S, "model steps")
    if too_long:
        fits = _floor3(OPTIMISTIC_MODEL_STEPS_PER_S * MAX_RUN_DAYS * 86_400 / (steps * longest))
        raise ConfigError(
            f"{given} asks for total_env_steps x rollouts_per_real x longest rollout = {_num(steps)} x "
            f"{_num(per_real)} x {longest} = {_num(rollout_steps)} model rollout steps; {too_long}; "
            f"expected {key} <= {_num(_floor3(fits * unit))} at this rollout length, or shorter rollouts")
    capacity = per_real * m.epoch_length * longest * m.retain_epochs
    if capacity > MAX_MODEL_BUFFER_TRANSITIONS:
        per_epoch = per_real * m.epoch_length * longest
        fix = (f"model.retain_epochs <= {MAX_MODEL_BUFFER_TRANSITIONS // per_epoch:.0f}"
               if per_epoch <= MAX_MODEL_BUFFER_TRANSITIONS else
               f"{key} <= {_num(_floor3(MAX_MODEL_BUFFER_TRANSITIONS / (m.epoch_length * longest) * unit))}")
        raise ConfigError(
            f"{given}, model.epoch_length={m.epoch_length} and model.retain_epochs={m.retain_epochs} size the model "
            f"buffer at rollouts_per_real x epoch_length x longest rollout x retain_epochs = "
            f"{_num(per_real)} x {m.epoch_length} x {longest} x {m.retain_epochs} = {_num(capacity)} "
            f"transitions, more than the {_num(MAX_MODEL_BUFFER_TRANSITIONS)} that any machine can hold "
            f"(36-168+ bytes each); expected at most {_num(MAX_MODEL_BUFFER_TRANSITIONS)}, e.g. {fix}")


