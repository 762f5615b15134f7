"""The task's rules a model rollout needs: when a branch terminates and, optionally, what it earns.

The ensemble predicts the next state; whether that state is terminal, and its reward, are the task's
own rules wherever they are known. Where each comes from, first match wins:

* termination: ``model.termination`` (a callable named in the config), the env's ``termination_fn``,
  the known rule for ``env.id`` (:mod:`mbpo.models.termination`), else a termination head the ensemble
  learns. ``model.learned_termination=true`` skips the env's and the known rule.
* reward: ``model.reward``, the env's ``reward_fn``, else the ensemble's reward head.

A rule is batched, ``(obs (B, obs_dim), action (B, act_dim) or (B,), next_obs (B, obs_dim)) -> (B,)``
on the run's device: bool for termination, float for reward (``(B, 1)``, mbrl-lib's shape, is taken
too). It must be a pure function of those tensors: rollouts call it from the model thread, on states
the simulator never saw. :func:`check_rules` runs every rule on a real batch at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from envs.contract import Probe
from mbpo.config import ModelConfig
from mbpo.config.callables import load_callable
from mbpo.data.transitions import ACTION, NEXT_OBS, NEXT_OBS_VALID, OBS, REWARD, TERMINATED, real_transitions
from mbpo.errors import MbpoError
from mbpo.models.termination import known_termination

__all__ = ["Rule", "RuleFn", "ModelRules", "model_rules", "env_rule", "check_rules", "probe_transitions"]

RuleFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(obs, action, next_obs) -> (B,)``: bool for a termination rule, float for a reward."""
_WRAPPED = ("env", "vec_env", "vector_env", "inner", "base_env", "unwrapped")
"""Attributes through which adapters and wrappers hold the env they wrap (ours in envs/adapters/, gymnasium's
wrappers, torchrl's TransformedEnv); the user's env is found by following them."""
_MAX_DEPTH = 8


@dataclass(frozen=True)
class Rule:
    """One task rule and where it came from. Calling it checks what it returned (shape, dtype, device:
    host-side, no sync), takes ``(B, 1)`` as ``(B,)`` and gives a reward as float32.
    """

    kind: str
    """``termination`` or ``reward``."""
    fn: RuleFn
    source: str
    """Where it came from, for messages: ``model.reward='pkg.mod:fn'``, ``the env's reward_fn (MyEnv)``, ..."""

    def __call__(self, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        out = self.fn(obs, action, next_obs)
        n = next_obs.shape[0]
        if isinstance(out, torch.Tensor) and out.shape == (n, 1):
            out = out.squeeze(-1)
        if (not isinstance(out, torch.Tensor) or out.shape != (n,) or out.device != next_obs.device
                or (out.dtype != torch.bool if self.kind == "termination" else not out.is_floating_point())):
            got = (f"{out.dtype} {tuple(out.shape)} on {out.device}" if isinstance(out, torch.Tensor)
                   else f"a {type(out).__name__}")
            want = "torch.bool" if self.kind == "termination" else "a float dtype"
            raise MbpoError(f"{self.source} returned {got}; expected a tensor of {want}, shape ({n},), on "
                            f"{next_obs.device} (one {self.kind} per row of next_obs)")
        return out if self.kind == "termination" else out.float()


@dataclass(frozen=True)
class ModelRules:
    """The rules in effect for one run; None = the ensemble learns that one."""

    termination: Rule | None
    reward: Rule | None

    def describe(self) -> str:
        termination = self.termination.source if self.termination else "a learned termination head"
        reward = self.reward.source if self.reward else "learned by the ensemble"
        return f"termination from {termination}; reward {'from ' if self.reward else ''}{reward}"

    def __iter__(self) -> Iterator[Rule]:
        return iter(r for r in (self.termination, self.reward) if r is not None)


def model_rules(config: ModelConfig, env_id: str, env: object | None = None) -> ModelRules:
    """The termination and reward rules for a run (module docstring: which source wins)."""
    termination: Rule | None = None
    if config.termination is not None:
        termination = Rule("termination", load_callable(config.termination, "model.termination"),
                           f"model.termination={config.termination!r}")
    elif not config.learned_termination:
        found = env_rule(env, "termination_fn")
        known = known_termination(env_id)
        if found is not None:
            termination = Rule("termination", *found)
        elif known is not None:
            termination = Rule("termination", known, f"the known rule for {env_id}")
    reward: Rule | None = None
    if config.reward is not None:
        reward = Rule("reward", load_callable(config.reward, "model.reward"), f"model.reward={config.reward!r}")
    else:
        found = env_rule(env, "reward_fn")
        if found is not None:
            reward = Rule("reward", *found)
    return ModelRules(termination, reward)


def env_rule(env: object | None, name: str) -> tuple[RuleFn, str] | None:
    """``env.<name>`` (``termination_fn`` or ``reward_fn``) and a description, looking through adapters and
    wrappers (``_WRAPPED``) to the user's own env; None when no object on the way defines it.
    """
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(env, 0)]
    while stack:
        obj, depth = stack.pop(0)
        if obj is None or id(obj) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(obj))
        fn = _attribute(obj, name)
        if fn is not None:
            if not callable(fn):
                raise MbpoError(f"the env's {name} ({type(obj).__name__}.{name}) is a {type(fn).__name__}, not a "
                                "callable; expected a batched (obs, action, next_obs) -> (B,) function")
            return fn, f"the env's {name} ({type(obj).__name__})"
        stack += [(_attribute(obj, inner), depth + 1) for inner in _WRAPPED]
    return None


def _attribute(obj: object, name: str) -> Any:
    """``getattr(obj, name, None)`` that also survives a ``__getattr__`` raising something else."""
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - a wrapper's __getattr__ may raise anything for a name it does not forward
        return None


def probe_transitions(probe: Probe) -> TensorDict:
    """The real transitions of a probe's vector step (:func:`envs.contract.probe`: a checked reset with a seed,
    then uniformly random actions).
    """
    return real_transitions(probe.obs, probe.actions, probe.reward, probe.next_obs, probe.terminated,
                            probe.truncated, probe.info)


def check_rules(rules: ModelRules, batch: TensorDict) -> list[str]:
    """Run every rule on real transitions ``batch``: each must return ``(B,)`` of its dtype on the batch's
    device (a reward finite too), else an :class:`MbpoError` says which rule and what it returned. Returns
    one warning per rule that disagrees with the env on these transitions (rows whose next obs is known).
    """
    obs, action, next_obs = batch[OBS], batch[ACTION], batch[NEXT_OBS]
    known = batch[NEXT_OBS_VALID] if NEXT_OBS_VALID in batch.keys() else torch.ones_like(batch[TERMINATED])
    warnings = []
    for rule in rules:
        try:
            out = rule(obs, action, next_obs)
        except MbpoError:
            raise
        except Exception as exc:  # the user's code: any failure becomes one line naming the rule
            raise MbpoError(f"{rule.source} raised {type(exc).__name__}: {exc}, on real transitions (obs "
                            f"{_spec(obs)}, action {_spec(action)}, next_obs {_spec(next_obs)})") from exc
        if rule.kind == "reward" and not bool(torch.isfinite(out).all()):
            raise MbpoError(f"{rule.source} returned non-finite rewards on real transitions: "
                            f"{out[~torch.isfinite(out)][:3].tolist()}; expected finite values")
        env_value = batch[TERMINATED] if rule.kind == "termination" else batch[REWARD]
        same = out == env_value if rule.kind == "termination" else torch.isclose(out, env_value.float(),
                                                                                 rtol=1e-4, atol=1e-4)
        wrong = int((~same & known).sum())
        if wrong:
            warnings.append(f"{rule.source} disagrees with the env's {rule.kind} on {wrong} of {int(known.sum())} "
                            "real transitions; model rollouts would then end or be rewarded unlike the real ones")
    return warnings


def _spec(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)} on {t.device}"
