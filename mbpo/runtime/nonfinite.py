"""The one rule for non-finite env data (``runtime.nonfinite``), applied alike by every trainer and backend.

A NaN or inf in an observation or a reward poisons every batch that samples it: the learner's update is
skipped (or diverges) and the model's fit refuses its data, far from the cause. So each vector step is
screened where it is collected (the SyncTrainer's loop, every collector's :class:`EnvStepper`) before it can
reach a buffer:

* ``raise``: :class:`NonFiniteEnvError`, one line naming the env index, the field, the env step and the fix;
  the trainer writes the final checkpoint of what came before and the CLI exits 2;
* ``drop``: the env's row is dropped and counted (``nonfinite_dropped``); an env left in a non-finite state
  is reset alone, so nothing acts on it.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

import envs
from envs.contract import check_reset
from mbpo.data.transitions import NEXT_OBS, OBS, REWARD
from mbpo.errors import EnvFaultError
from mbpo.runtime.env_builder import EnvContractError

__all__ = ["NonFiniteEnvError", "finite_rows", "screen", "reset_poisoned"]

FIELDS = (OBS, REWARD, NEXT_OBS)
"""The fields screened: what a buffer keeps from the env (actions come from the policy, checked there)."""


class NonFiniteEnvError(EnvFaultError):
    """An env returned a non-finite observation or reward (``runtime.nonfinite=raise``): the env's fault, so a
    one-line user error.
    """


def finite_rows(step: TensorDict) -> torch.Tensor:
    """Bool ``(num_envs,)`` on the step's device: the rows whose obs, reward and next obs are all finite."""
    return (torch.isfinite(step[OBS]).all(-1) & torch.isfinite(step[REWARD])
            & torch.isfinite(step[NEXT_OBS]).all(-1))


def screen(step: TensorDict, policy: str, at_env_step: int, who: str = "") -> torch.Tensor | None:
    """Hold one vector step (``mbpo.data.transitions`` keys, batch ``(num_envs,)``) to ``policy``: None when every
    row is finite (the common case: one sync), else the CPU mask of finite rows under ``drop``, and a
    :class:`NonFiniteEnvError` under ``raise``. ``at_env_step`` is the run's env step of row 0; ``who``
    prefixes the message (``"collector 1: "``).
    """
    finite = finite_rows(step).cpu()
    if bool(finite.all()):
        return None
    if policy == "drop":
        return finite
    row = int((~finite).nonzero()[0, 0])
    bad = [name for name in FIELDS if not bool(torch.isfinite(step[name][row]).all())]
    values = {name: _values(step[name][row]) for name in bad}
    raise NonFiniteEnvError(
        f"{who}env index {row} returned a non-finite {' and '.join(bad)} ({values}) at env step "
        f"{at_env_step + row:,}; fix the env, or set runtime.nonfinite=drop to drop such rows and count them "
        "(nonfinite_dropped)")


def reset_poisoned(env: envs.VecEnv, obs: torch.Tensor, who: str = "the env") -> tuple[torch.Tensor,
                                                                                         torch.Tensor | None]:
    """Reset only the envs whose observation is non-finite (no policy can act on it); returns the observations
    to act on and the CPU mask of the envs reset (None when none was). ``who`` names the env where its partial
    reset breaks the contract (it returns every env's observation, not only the reset ones').
    """
    poisoned = ~torch.isfinite(obs).all(-1)
    if not bool(poisoned.any()):
        return obs, None
    fresh = env.reset(env_ids=poisoned)
    try:
        check_reset(env, fresh)
    except envs.ContractError as exc:
        raise EnvContractError(f"{who}: reset(env_ids=...) {str(exc).removeprefix('reset returned ')}") from exc
    return fresh, poisoned.cpu()


def _values(value: torch.Tensor) -> Any:
    """A row as the message shows it: a scalar, or a short list."""
    flat = value.flatten().tolist()
    return flat[0] if value.dim() == 0 else flat[:8] + (["..."] if len(flat) > 8 else [])
