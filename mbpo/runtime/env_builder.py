"""Every env of a run, built from its config: ``envs.make(env.id)``, or ``env.factory`` imported by name.

The trainer's env, each collector's (in whatever thread, process or Ray actor it runs), the evaluation env and
``python -m mbpo eval``'s all come from here, so they are of one kind. Only the config (plain data) needs to
reach a child: the factory is a ``"package.module:callable"`` string that the child imports itself.
:func:`check_env` holds one of them to the VecEnv contract before anything trains on it.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch

import envs
from envs.contract import Probe, check_first_reset, check_reset, check_step, field_name, probe
from envs.contract import check_interface as contract_interface
from mbpo.config import ConfigError, EnvConfig
from mbpo.errors import EnvFaultError

__all__ = ["build_env", "collector_env_from", "check_env", "check_interface", "check_training_env", "env_label",
           "factory_name", "EnvContractError"]


class EnvContractError(EnvFaultError):
    """The run's env returns from ``reset`` or ``step`` what the VecEnv contract does not allow (one field,
    named, with what was expected and how to fix it).
    """


def build_env(env: EnvConfig, num_envs: int, device: str | torch.device, seed: int,
              render: bool = False) -> envs.VecEnv:
    """``num_envs`` envs as ``env`` says, on ``device``; a factory that cannot be used is a ConfigError.

    ``render``: an env that can draw frames (``render_mode="rgb_array"``, for a video); a factory's env renders
    as its own ``render`` does.
    """
    if env.factory is None:
        extra = {"render_mode": "rgb_array"} if render else {}
        try:
            return envs.make(env.id, num_envs, device=device, seed=seed, source=env.source, **extra)
        except envs.RenderError as exc:  # a renderer that cannot work here (mjlab without offscreen OpenGL)
            raise ConfigError(f"{env_label(env)}: {exc}") from exc
    try:
        return envs.make_from_factory(env.factory, num_envs, device=device, seed=seed, **env.kwargs)
    except envs.EnvFactoryError as exc:
        raise ConfigError(f"{env_label(env)} {exc.problem}") from exc


def factory_name(env_factory: Any) -> str:
    """``module:qualname`` of a trainer's ``env_factory`` (of its class, for a callable object); a
    ``functools.partial`` with its arguments, which tell two of one function apart.
    """
    if isinstance(env_factory, functools.partial):
        bound = [repr(a) for a in env_factory.args] + [f"{k}={v!r}" for k, v in env_factory.keywords.items()]
        return f"functools.partial({', '.join([factory_name(env_factory.func), *bound])})"
    qualname = getattr(env_factory, "__qualname__", type(env_factory).__name__)
    return f"{getattr(env_factory, '__module__', '?')}:{qualname}"


def collector_env_from(env_factory: Any, collector_id: int, incarnation: int, seed: int,
                       device: str | torch.device, num_envs: int) -> envs.VecEnv:
    """What a trainer's ``env_factory(collector_id, incarnation, seed)`` returns, wrapped by its type as
    ``env.factory``'s is (a gymnasium VectorEnv, an rsl_rl or torchrl env); one that is no env, or not of
    ``num_envs`` (``env.num_envs``) envs, is a ConfigError naming the factory. Every collector's env, in every
    backend, is built here: 4 envs under env.num_envs=1 trained with the gate and rates off, or crashed on resume.
    """
    name = factory_name(env_factory)
    try:
        env = envs.as_vec_env(env_factory(collector_id, incarnation, seed), device=device, seed=seed, path=name)
    except envs.EnvFactoryError as exc:
        raise ConfigError(f"env_factory {name} {exc.problem}") from exc
    built = getattr(env, "num_envs", None)
    if isinstance(built, int) and built != num_envs:  # another kind of num_envs: the contract check names it
        env.close()
        raise ConfigError(f"env_factory {name} built {built:,} envs for collector {collector_id}; expected "
                          f"env.num_envs={num_envs:,}, the envs the run counts per collector (its budgets, ratio "
                          f"gate, rates and memory check): build that many, or start the run with "
                          f"env.num_envs={built}")
    return env


def check_interface(env: envs.VecEnv, config: EnvConfig) -> None:
    """Hold what the trainer reads of ``env`` before calling it (``num_envs``, ``device``, the spaces, ``reset``'s
    keywords: envs.contract.check_interface) to the contract; first thing after the run's env is built.
    """
    try:
        contract_interface(env)
    except envs.ContractError as exc:
        raise EnvContractError(f"{env_label(config)}: {exc}") from exc


def check_env(env: envs.VecEnv, config: EnvConfig, seed: int) -> tuple[envs.VecEnv, Probe]:
    """Hold ``env``'s first reset and step (seeded by ``seed``, random actions) to the VecEnv contract, before
    anything trains on data of this kind: the learner would otherwise fail far from the cause, and differently
    on each backend. A field that does not fit is an :class:`EnvContractError`; a float field in another float
    dtype is cast to float32, and one line on stderr says so; so does one line when ``reset(seed=...)`` does
    not seed the env (the run goes on, not reproducible). Returns the env (wrapped to cast, where it needs
    it) and the probe: its transitions, and the fields every env of the run must cast (``float32_fields``).

    It steps ``env``: give it an env that a later ``reset(seed=...)`` starts over, such as the evaluation env.
    """
    try:
        checked = probe(env, seed)
    except envs.ContractError as exc:
        at = "" if env.num_envs == config.num_envs else f" with num_envs={env.num_envs}"  # an evaluation env
        raise EnvContractError(f"{env_label(config)}{at}: {exc}") from exc
    if checked.float32_fields:
        found = ", ".join(f"{field_name(k)} as {str(d).removeprefix('torch.')}"
                          for k, d in checked.float32_fields.items())
        print(f"[mbpo] {env_label(config)}: the env returns {found}; converting to float32 at every reset and step "
              "(what the learner computes in; return float32 to save the copy)", file=sys.stderr)
    if checked.unseeded:
        print(f"[mbpo] {env_label(config)}: {checked.unseeded}: reset(seed=...) does not seed what the env draws, "
              "or its reset depends on more than the seed (a curriculum, a step count). The run trains; in the "
              "first case no evaluation can be repeated, and two runs with one seed differ unless the env seeds "
              "itself when built: seed every env's random draws from reset's seed (the VecEnv contract, "
              "envs/base.py)", file=sys.stderr)
    return envs.as_float32(env, checked.float32_fields), checked


def check_training_env(env: envs.VecEnv, label: str, obs: Any = None, step: Any = None, first: bool = True) -> None:
    """Hold a training env's first reset (``obs``) or first step (``step``), as the run took them, to the VecEnv
    contract. The start-up probe steps the evaluation env only (stepping the run's own env would move what it
    keeps across resets), with ``eval_episodes`` envs: a field that breaks only at ``env.num_envs`` (a reward
    squeezed to a scalar at one env) is named here, before the learner meets it. ``env`` casts to float32
    what the probe found it must, so a field still in another dtype differs from the evaluation env's.
    ``label`` names the env (:func:`env_label`, with the collector). Raises :class:`EnvContractError`.
    ``first=False``: a later reset's or step's output, checked where processing it failed (the observations then
    may hold a non-finite row, which ``runtime.nonfinite`` rules).
    """
    try:
        casts = {} if obs is None else check_first_reset(env, obs) if first else check_reset(env, obs)
        casts |= {} if step is None else check_step(env, step)
    except envs.ContractError as exc:
        raise EnvContractError(f"{label}: {exc}") from exc
    if casts:
        found = ", ".join(f"{field_name(k)} as {str(d).removeprefix('torch.')}" for k, d in casts.items())
        where = "with eval_episodes envs" if first else "before"
        raise EnvContractError(f"{label}: {'reset' if step is None else 'step'} returned {found} with num_envs="
                               f"{env.num_envs}, float32 {where}; expected one dtype at every step and "
                               "num_envs (the VecEnv contract, envs/base.py): return float32")


def env_label(env: EnvConfig) -> str:
    """How messages name the run's env: by the factory that builds it, else by its id."""
    return f"env.factory={env.factory!r}" if env.factory is not None else f"env.id={env.id!r}"
