"""n-step transitions (``agent.n_step``), built from the 1-step stream of a vectorized env as it is collected.

For a start step ``t`` of env ``e`` the n-step transition is
``(s_t, a_t, R = sum_{i<m} gamma^i r_{t+i}, s_{t+m}, terminated, discount = gamma^m)`` with ``m = n``, or fewer
where the episode ends first: a termination ends it without a bootstrap, a time-out bootstraps from the
true last observation. The learner's target is ``R + discount * (1 - terminated) * V(s')``. Every 1-step
transition starts exactly one n-step transition, emitted ``n - 1`` steps later (at once at an episode's end).
The envs of a vector step are independent streams; work per step is ``n`` masked gathers over the envs.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from mbpo.buffers import ACTION, NEXT_OBS, NEXT_OBS_VALID, OBS, REWARD, TERMINATED

__all__ = ["NStepBuilder", "DISCOUNT"]

DISCOUNT = "discount"
"""float32 ``(B,)``: ``gamma ** m`` for an m-step transition (the bootstrap's discount)."""


class NStepBuilder:
    """Holds the last ``n`` vector steps of ``num_envs`` envs and emits n-step transitions."""

    def __init__(self, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n_step={n} is not allowed; expected n >= 1")
        self.n, self.gamma = int(n), float(gamma)
        self._ring: TensorDict | None = None  # [n, num_envs] of 1-step transitions, time index t % n
        self._age: torch.Tensor | None = None  # steps since each env's episode began, capped at n
        self._t = 0

    def push(self, step: TensorDict, truncated: torch.Tensor) -> TensorDict:
        """Add one vector step (1-step transitions of every env, mbpo.buffers keys, batch ``[num_envs]``) and
        whether each env's episode was truncated; returns the n-step transitions that are complete now.
        """
        num_envs, device = step.shape[0], step.device
        if self._ring is None:
            self._ring = step.unsqueeze(0).expand(self.n, num_envs).clone()
            self._age = torch.zeros(num_envs, dtype=torch.int64, device=device)
        assert self._age is not None
        slot = self._t % self.n
        self._ring[slot] = step
        self._t += 1
        self._age = torch.clamp(self._age + 1, max=self.n)
        done = step[TERMINATED] | truncated.to(device)
        out = []
        ret = torch.zeros(num_envs, dtype=torch.float32, device=device)
        for d in range(self.n):  # start step t - d; its return accumulates rewards from the newest backwards
            start = self._ring[(slot - d) % self.n]
            ret = start[REWARD] + self.gamma * ret
            emit = (done & (d < self._age)) | (~done & (d == self.n - 1) & (self._age == self.n))
            if not bool(emit.any()):
                continue
            part = TensorDict({
                OBS: start[OBS][emit], ACTION: start[ACTION][emit], REWARD: ret[emit],
                NEXT_OBS: step[NEXT_OBS][emit], TERMINATED: step[TERMINATED][emit],
                NEXT_OBS_VALID: step[NEXT_OBS_VALID][emit] if NEXT_OBS_VALID in step.keys() else emit[emit],
                DISCOUNT: torch.full((int(emit.sum()),), self.gamma ** (d + 1), dtype=torch.float32, device=device),
            }, batch_size=[int(emit.sum())], device=device)
            out.append(part)
        self._age = torch.where(done, torch.zeros_like(self._age), self._age)
        if not out:
            return step[:0].select(OBS, ACTION, REWARD, NEXT_OBS, TERMINATED).update(
                {NEXT_OBS_VALID: torch.zeros(0, dtype=torch.bool, device=device),
                 DISCOUNT: torch.zeros(0, dtype=torch.float32, device=device)})
        return torch.cat(out)

    def forget(self, env_ids: torch.Tensor) -> None:
        """Drop what is pending for these envs (their stream broke: a non-finite step was dropped)."""
        if self._age is not None:
            self._age[env_ids.to(self._age.device)] = 0
