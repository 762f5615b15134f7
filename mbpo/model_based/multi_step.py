"""Model rollouts stored as n-step transitions: the learner's targets look several model steps ahead.

A branch of model steps ``s_0, a_0, r_0, s_1, ...`` is stored as one transition per step ``t`` whose reward is
``r_t + gamma r_{t+1} + ... + gamma^{m-1} r_{t+m-1}``, whose next state is ``s_{t+m}`` and whose discount is
``gamma^m``: ``m = n`` where the branch goes on that far, fewer where it ends sooner (a termination ends the
return with nothing to bootstrap from; the rollout's last step, or a step dropped as absurd or unsure,
bootstraps from the last state the model stood behind). It is the n-step return of real data
(mbpo.data.nstep) on the model's branches, which are on-policy for the policy that rolled them, so their
n-step returns carry no off-policy bias: model-based value expansion's idea (MVE, Feinberg et al. 2018; the
H-step model returns of STEVE, Buckman et al. 2018, and of Dreamer's imagined returns) inside MBPO's branched
rollouts. SAC reads each row's ``discount`` (mbpo.agents.sac), so real 1-step rows and model n-step rows mix
in one batch. As with n-step SAC (FastTD3, D4PG), the entropy bonus of the intermediate steps is left out.

Why: at thousands of envs a vector step brings more real data than the updates can use, so more model data
adds little; what the model can still give is a target that sees further than one step. SAC with 3-step
returns reached Pendulum's threshold at 32 updates per vector step where 1-step SAC and 1-step MBPO had not
(docs/notes/mbpo-at-scale.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict

from mbpo.data.transitions import ACTION, DISCOUNT, MODEL_VERSION, NEXT_OBS, OBS, REWARD, TERMINATED, transitions

__all__ = ["BRANCH", "NStepBranches"]

BRANCH = "branch"
"""int64 ``(B,)``: which branch of a rollout a model step belongs to (its start row), for :class:`NStepBranches`."""


class NStepBranches:
    """A rollout sink: takes each step's kept transitions (with :data:`BRANCH`), passes n-step transitions on.

    Windows are kept per branch in ``n`` slots (the window opened at step ``t`` in slot ``t % n``), so memory is
    ``branches x n`` rows whatever the rollout length. Call :meth:`step` once per rollout step, in order, then
    :meth:`close` after the last.
    """

    def __init__(self, n: int, gamma: float, branches: int, obs_dim: int, act_dim: int,
                 sink: Callable[[TensorDict], None], device: torch.device, action_dtype: torch.dtype) -> None:
        self.n, self.gamma, self.sink = n, gamma, sink
        self.t = 0
        self.obs = torch.zeros(branches, n, obs_dim, device=device)
        self.action = torch.zeros(branches, n, act_dim, dtype=action_dtype, device=device) if act_dim else \
            torch.zeros(branches, n, dtype=action_dtype, device=device)
        self.ret = torch.zeros(branches, n, device=device)
        self.steps = torch.zeros(branches, n, dtype=torch.int64, device=device)
        self.open = torch.zeros(branches, n, dtype=torch.bool, device=device)
        self.live = torch.ones(branches, dtype=torch.bool, device=device)
        """Branches that may still take a step (not terminated, not dropped)."""
        self.last_obs = torch.zeros(branches, obs_dim, device=device)
        """Each branch's newest state the model stood behind: the bootstrap of windows a drop or the end cuts."""
        self.version = 0

    def step(self, rows: TensorDict) -> None:
        """One rollout step's kept transitions; a live branch without a row in it was dropped at this step."""
        branch = rows[BRANCH]
        if rows.shape[0]:
            self.version = int(rows[MODEL_VERSION][0])
        kept = torch.zeros_like(self.live)
        kept[branch] = True
        self._emit(self.open & (self.live & ~kept).unsqueeze(1), self.last_obs, terminated=False)  # dropped now
        self.live &= kept
        slot = self.t % self.n
        self.obs[branch, slot], self.action[branch, slot] = rows[OBS], rows[ACTION]
        self.ret[branch, slot], self.steps[branch, slot] = 0.0, 0
        self.open[branch, slot] = True
        grow = self.open[branch]
        self.ret[branch] += torch.where(grow, self.gamma ** self.steps[branch].float(), 0.0) * \
            rows[REWARD].float().unsqueeze(1)
        self.steps[branch] += grow.long()
        self.last_obs[branch] = rows[NEXT_OBS]
        terminated = torch.zeros_like(self.live)
        terminated[branch] = rows[TERMINATED]
        full = self.open & (self.steps >= self.n)
        self._emit(full & ~terminated.unsqueeze(1), self.last_obs, terminated=False)
        self._emit(self.open & terminated.unsqueeze(1), self.last_obs, terminated=True)
        self.live &= ~terminated
        self.t += 1

    def close(self) -> None:
        """The rollout's end: every open window bootstraps from its branch's last state."""
        self._emit(self.open, self.last_obs, terminated=False)

    def _emit(self, which: torch.Tensor, next_obs: torch.Tensor, terminated: bool) -> None:
        """Pass on the windows ``which`` (``(branches, n)``), ending at ``next_obs`` of their branch, and close them."""
        b, s = which.nonzero(as_tuple=True)
        if b.numel() == 0:
            return
        m = self.steps[b, s]
        out = transitions(self.obs[b, s], self.action[b, s], self.ret[b, s], next_obs[b],
                          torch.full_like(m, terminated, dtype=torch.bool))
        out[DISCOUNT] = self.gamma ** m.float()
        out[MODEL_VERSION] = torch.full_like(m, self.version)
        self.open[b, s] = False
        self.sink(out)
