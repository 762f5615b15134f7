"""n-step transitions (``agent.n_step``), built from the 1-step stream of a vectorized env as it is collected.

For a start step ``t`` of env ``e`` the n-step transition is
``(s_t, a_t, R = sum_{i<m} gamma^i r_{t+i}, s_{t+m}, terminated, discount = gamma^m)`` with ``m = n``, or fewer
where the episode ends first: a termination ends it without a bootstrap, a time-out bootstraps from the
true last observation. The learner's target is ``R + discount * (1 - terminated) * V(s')``. Every 1-step
transition starts exactly one n-step transition, emitted ``n - 1`` steps later (at once at an episode's end).
The envs of a vector step are independent streams; work per step is ``n`` masked gathers over the envs.

With ``keep_first_step`` (MBPO with n-step returns), each n-step row also keeps its first step's reward, next
observation and termination (mbpo.data.transitions.FIRST_STEP): the learner reads the n-step fields and the dynamics
model, which learns one step, reads the first step's (``first_step_view``). Every 1-step transition still lands
in the replay buffer exactly once.

The windows still open are state: the sync trainer's checkpoint holds them (``state_dict``), so its resume is
exact; a resume that starts new episodes ends them as time-outs at their last step (``flush``), losing none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from mbpo.data.transitions import DISCOUNT, FIRST_STEP, NEXT_OBS, NEXT_OBS_VALID, REWARD, TERMINATED

__all__ = ["NStepBuilder", "DISCOUNT", "n_step_builder"]



class NStepBuilder:
    """Holds the last ``n`` vector steps of ``num_envs`` envs and emits n-step transitions."""

    def __init__(self, n: int, gamma: float, keep_first_step: bool = False) -> None:
        if n < 1:
            raise ValueError(f"n_step={n} is not allowed; expected n >= 1")
        self.n, self.gamma, self.keep_first_step = int(n), float(gamma), bool(keep_first_step)
        self._ring: TensorDict | None = None  # [n, num_envs] of 1-step transitions, time index t % n
        self._age: torch.Tensor | None = None  # steps since each env's episode began, capped at n
        self._t = 0

    def push(self, step: TensorDict, truncated: torch.Tensor, keep: torch.Tensor | None = None) -> TensorDict:
        """Add one vector step (1-step transitions of every env, mbpo.data.transitions keys, batch ``[num_envs]``).

        ``truncated`` says which episodes hit their time limit; returns the n-step transitions complete now.
        A row not in ``keep`` (a non-finite step that is dropped) emits nothing; its env's pending windows end as
        time-outs at its last kept step (as :meth:`flush` ends them), so no finite step before it is lost. Keys
        other than the transition's own (the acting policy's version) come from the start step.
        """
        num_envs, device = step.shape[0], step.device
        if self._ring is None:
            self._ring = step.unsqueeze(0).expand(self.n, num_envs).clone()
            self._age = torch.zeros(num_envs, dtype=torch.int64, device=device)
        assert self._age is not None
        cut = None
        if keep is not None and self._t > 0 and self.n > 1 and not bool(keep.all()):
            dropped, pending = ~keep.to(device), self._age  # windows the last push left open: d < min(age, n - 1)
            cut = self._close(self._ring[(self._t - 1) % self.n],
                              lambda d: dropped & (d < pending) & (d < self.n - 1))
        slot = self._t % self.n
        self._ring[slot] = step
        self._t += 1
        self._age = torch.clamp(self._age + 1, max=self.n)
        done = step[TERMINATED] | truncated.to(device)
        keep = torch.ones_like(done) if keep is None else keep.to(device)
        age = self._age
        out = self._close(step, lambda d: keep & ((done & (d < age)) | (~done & (d == self.n - 1) & (age == self.n))))
        self._age = torch.where(done | ~keep, torch.zeros_like(self._age), self._age)
        return out if cut is None else torch.cat((cut, out))

    def _close(self, end: TensorDict, emit: Callable[[int], torch.Tensor]) -> TensorDict:
        """The windows ending at the newest push whose start ``t - d`` is in ``emit(d)``: each start's return
        accumulates rewards from the newest backwards.
        """
        assert self._ring is not None
        out = []
        ret = torch.zeros(end.shape[0], dtype=torch.float32, device=end.device)
        for d in range(self.n):
            start = self._ring[(self._t - 1 - d) % self.n]
            ret = start[REWARD] + self.gamma * ret
            out.append(self._emit(start, end, ret, emit(d), d + 1))
        return torch.cat(out)

    def flush(self) -> TensorDict | None:
        """End every pending window as a time-out at the newest step (the run cut the episodes: their envs start
        new ones), so that no collected step is lost; None if nothing was pushed.
        """
        if self._ring is None or self.n == 1:
            return None
        age = self._age
        assert age is not None
        # the window of start t - (n - 1) closed with the newest push
        out = self._close(self._ring[(self._t - 1) % self.n], lambda d: (d < age) & (d < self.n - 1))
        self._age = torch.zeros_like(age)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The pending windows, so that a resume goes on with them (plain tensors: checkpoints load weights-only)."""
        if self._ring is None:
            return {"t": self._t}
        assert self._age is not None
        return {"t": self._t, "age": self._age.cpu(), "ring": self._ring.cpu().to_dict(),
                "ring_shape": list(self._ring.shape)}

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        self._t = int(state["t"])
        if "ring" not in state:
            self._ring, self._age = None, None
            return
        self._ring = TensorDict(state["ring"], batch_size=state["ring_shape"]).to(device)
        self._age = state["age"].to(device)

    def _emit(self, start: TensorDict, end: TensorDict, ret: torch.Tensor, emit: torch.Tensor, m: int) -> TensorDict:
        """The m-step transitions of the envs in ``emit``: from ``start``, ending with ``end``."""
        part = start[emit].clone()
        if self.keep_first_step:
            for key, first in FIRST_STEP.items():
                if key in part.keys():
                    part[first] = part[key].clone()
        part[REWARD] = ret[emit]
        for key in (NEXT_OBS, TERMINATED, NEXT_OBS_VALID):
            if key in end.keys():
                part[key] = end[key][emit]
        part[DISCOUNT] = torch.full((part.shape[0],), self.gamma ** m, dtype=torch.float32, device=part.device)
        return part


def n_step_builder(agent: Any, keep_first_step: bool = False) -> NStepBuilder | None:
    """The builder an agent config asks for (``agent.n_step`` > 1, SAC's gamma), else None; ``keep_first_step``
    where a dynamics model learns from the same rows (model.enabled).
    """
    if agent.n_step <= 1:
        return None
    return NStepBuilder(agent.n_step, agent.sac.gamma, keep_first_step)
