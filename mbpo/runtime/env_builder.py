"""Every env of a run, built from its config: ``envs.make(env.id)``, or ``env.factory`` imported by name.

The trainer's env, each collector's (in whatever thread, process or Ray actor it runs), the evaluation env and
``python -m mbpo eval``'s all come from here, so they are of one kind. Only the config (plain data) needs to
reach a child: the factory is a ``"package.module:callable"`` string that the child imports itself.
:func:`check_env` holds one of them to the VecEnv contract before anything trains on it.
"""

from __future__ import annotations

import sys

import torch

import envs
from envs.contract import Probe, field_name, probe
from envs.contract import check_interface as contract_interface
from mbpo.config import ConfigError, EnvConfig
from mbpo.errors import MbpoError

__all__ = ["build_env", "check_env", "check_interface", "EnvContractError"]


class EnvContractError(MbpoError):
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
            raise ConfigError(f"{_label(env)}: {exc}") from exc
    try:
        return envs.make_from_factory(env.factory, num_envs, device=device, seed=seed, **env.kwargs)
    except envs.EnvFactoryError as exc:
        raise ConfigError(f"{_label(env)} {exc.problem}") from exc


def check_interface(env: envs.VecEnv, config: EnvConfig) -> None:
    """Hold what the trainer reads of ``env`` before calling it (``num_envs``, ``device``, the spaces, ``reset``'s
    keywords: envs.contract.check_interface) to the contract; first thing after the run's env is built.
    """
    try:
        contract_interface(env)
    except envs.ContractError as exc:
        raise EnvContractError(f"{_label(config)}: {exc}") from exc


def check_env(env: envs.VecEnv, config: EnvConfig, seed: int) -> tuple[envs.VecEnv, Probe]:
    """Hold ``env``'s first reset and step (seeded by ``seed``, random actions) to the VecEnv contract, before
    anything trains on data of this kind: the learner would otherwise fail far from the cause, and differently
    on each backend. A field that does not fit is an :class:`EnvContractError`; a float field in another float
    dtype is cast to float32, and one line on stderr says so. Returns the env (wrapped to cast, where it needs
    it) and the probe: its transitions, and the fields every env of the run must cast (``float32_fields``).

    It steps ``env``: give it an env that a later ``reset(seed=...)`` starts over, such as the evaluation env.
    """
    try:
        checked = probe(env, seed)
    except envs.ContractError as exc:
        at = "" if env.num_envs == config.num_envs else f" with num_envs={env.num_envs}"  # an evaluation env
        raise EnvContractError(f"{_label(config)}{at}: {exc}") from exc
    if checked.float32_fields:
        found = ", ".join(f"{field_name(k)} as {str(d).removeprefix('torch.')}"
                          for k, d in checked.float32_fields.items())
        print(f"[mbpo] {_label(config)}: the env returns {found}; converting to float32 at every reset and step "
              "(what the learner computes in; return float32 to save the copy)", file=sys.stderr)
    return envs.as_float32(env, checked.float32_fields), checked


def _label(env: EnvConfig) -> str:
    """How messages name the run's env: by the factory that builds it, else by its id."""
    return f"env.factory={env.factory!r}" if env.factory is not None else f"env.id={env.id!r}"
