"""LOOP's action-time planner (ARC): a short lookahead through the dynamics ensemble, the critics at its end.

Sikchi, Zhou, Held 2021 (CoRL), "Learning Off-Policy with Online Planning"; the authors' code is
github.com/hari-sikchi/LOOP, ``controllers/arc.py``. For each env, ``iterations`` times: draw ``sequences``
action sequences of ``horizon`` steps from a truncated normal (two standard deviations, each kept inside the
action bounds) around the current mean, add ``actor_sequences`` of the actor's deterministic actions along
the model, send ``particles`` model draws of each through every elite, and score a sequence by its
undiscounted model rewards over the first ``horizon - 1`` steps plus the critics' value of its last
(state, action), zero after a predicted termination, averaged over elites and particles. MPPI weights
``exp(kappa * (score - best))`` give the new mean and variance (``var_keep`` of the old variance kept). The
behaviour action is the first of one sequence drawn by those weights, and that sequence, shifted one step,
is the next mean (reset where an episode ends).

Deviations from arc.py:

* scores: the model stops at the last scored state; arc.py takes one more step and lets a termination
  predicted there zero the value of the step before it (here a value is zeroed by the terminations before it
  only); ``value: actor`` reduces the critics as the actor's loss does instead of reading the first (arc.py's
  SAC reads its first; REDQ's actor the mean of ten); a non-finite score weighs nothing (an iteration with none
  finite puts all weight on the first actor sequence), and an actor action the model made non-finite is
  replaced by the middle of the bounds (its sequence's score is non-finite anyway);
* bounds: per action dimension for the initial variance, the clipping and the reset mean (arc.py takes the
  first dimension's range for all, and resets the mean to zeros), the same for bounds of [-1, 1];
* cost only: only the elites run (arc.py also steps the non-elite members and never reads them), and the
  actor's sequences deal their rows to random elites round-robin (arc.py draws an elite per row);
* evaluation: the caller's (mbpo evaluates the actor; the authors log both the actor and the planner's
  weighted mean, ``plan(sample=False)``).
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import torch

from envs.device import restore_generator
from mbpo.config import LookaheadConfig
from mbpo.models.rules import RuleFn

__all__ = ["Lookahead", "PlanningAgent"]

TRUNCATE_AT = 2.0
"""The sampling distribution is a normal truncated at this many standard deviations (arc.py's truncnorm(-2, 2))."""


class PlanningAgent(Protocol):
    """What the planner needs of the learner (SAC): its deterministic actor and its critics."""

    device: torch.device

    def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor: ...

    def action_value(self, obs: torch.Tensor, action: torch.Tensor, first: bool = False) -> torch.Tensor: ...


class Lookahead:
    """ARC for a vectorized env: one plan (and one warm-start mean) per env row.

    ``ensemble`` is a :class:`~mbpo.models.ensemble.DynamicsEnsemble` (its elites score the sequences) and
    ``agent`` a :class:`PlanningAgent`, both on one device, where the planning runs; ``termination`` and
    ``reward`` are the task's rules (None: the ensemble's termination head, its reward output).
    """

    def __init__(self, config: LookaheadConfig, agent: PlanningAgent, ensemble: Any, termination: RuleFn | None,
                 reward: RuleFn | None, action_space: gym.spaces.Space, seed: int) -> None:
        if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
            raise TypeError(f"model.lookahead plans continuous actions (a flat Box); got {action_space}")
        if termination is None and not ensemble.learn_termination:
            raise ValueError("model.lookahead needs a termination rule or the ensemble's termination head")
        if reward is None and not ensemble.learn_reward:
            raise ValueError("model.lookahead needs a reward rule or the ensemble's reward output")
        self.config, self.agent, self.ensemble = config, agent, ensemble
        self.termination, self.reward = termination, reward
        self.device = ensemble.device
        self.low = torch.as_tensor(action_space.low, dtype=torch.float32, device=self.device)
        self.high = torch.as_tensor(action_space.high, dtype=torch.float32, device=self.device)
        self.act_dim = int(self.low.shape[0])
        self.middle = (self.low + self.high) / 2
        """Where a mean starts (arc.py: zeros, the middle of [-1, 1])."""
        self.initial_var = (self.high - self.low).square() / 16  # arc.py: (high - low)^2 / 16
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.mean: torch.Tensor | None = None
        """``(num_envs, horizon, act_dim)``: each env's warm start, the sequence its last action came from."""

    def state_dict(self) -> dict[str, Any]:
        """The warm starts and the generator, on CPU: what a resume needs to plan as an unbroken run would."""
        return {"mean": None if self.mean is None else self.mean.cpu().clone(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = None if state["mean"] is None else state["mean"].to(self.device)
        restore_generator(self.generator, state["generator"])

    def end_episodes(self, done: torch.Tensor) -> None:
        """Forget the warm start of the envs whose episode just ended (bool ``(num_envs,)``)."""
        if self.mean is not None and bool(done.any()):
            self.mean[done.to(self.device)] = self.middle

    @torch.no_grad()
    def plan(self, obs: torch.Tensor, sample: bool = True) -> torch.Tensor:
        """Actions ``(num_envs, act_dim)`` on the planner's device for ``obs`` ``(num_envs, obs_dim)``:
        the first of a sequence drawn by its MPPI weight (``sample``), else of the weighted mean sequence.
        """
        c = self.config
        obs = obs.to(self.device, torch.float32)
        b, h = obs.shape[0], c.horizon
        if self.mean is None or self.mean.shape[0] != b:
            self.mean = self.middle.expand(b, h, self.act_dim).clone()
        mean = torch.cat((self.mean[:, 1:], self.mean[:, -1:]), 1)  # shifted one step: arc.py's warm start
        var = self.initial_var.expand(b, h, self.act_dim)
        actor = self.actor_sequences(obs)
        for _ in range(c.iterations):
            spread = torch.minimum(torch.minimum(((mean - self.low) / 2).square(), ((self.high - mean) / 2).square()),
                                   var).sqrt()
            z = torch.empty((b, c.sequences, h, self.act_dim), device=self.device)
            torch.nn.init.trunc_normal_(z, a=-TRUNCATE_AT, b=TRUNCATE_AT, generator=self.generator)
            seqs = torch.cat((mean.unsqueeze(1) + spread.unsqueeze(1) * z, actor), 1)
            seqs = torch.maximum(torch.minimum(seqs, self.high), self.low)
            weights = self.weights(self.scores(obs, seqs))  # (b, candidates)
            mean = torch.einsum("bc,bchd->bhd", weights, seqs)
            new_var = torch.einsum("bc,bchd->bhd", weights, (seqs - mean.unsqueeze(1)).square())
            var = c.var_keep * var + (1 - c.var_keep) * new_var
        if sample:
            pick = torch.multinomial(weights, 1, generator=self.generator).squeeze(1)
            mean = seqs[torch.arange(b, device=self.device), pick]
        self.mean = mean
        return mean[:, 0].clone()

    def weights(self, scores: torch.Tensor) -> torch.Tensor:
        """MPPI's ``exp(kappa * (score - best))``, normalised per env; a non-finite score weighs nothing, and an
        env with no finite score puts all its weight on its first actor sequence (or its first sequence).
        """
        finite = torch.isfinite(scores)
        logits = torch.where(finite, self.config.kappa * scores, -torch.inf)
        none = ~finite.any(1)
        if bool(none.any()):
            fallback = self.config.sequences if self.config.actor_sequences else 0
            logits[none] = -torch.inf
            logits[none, fallback] = 0.0
        return torch.softmax(logits, 1)

    def actor_sequences(self, obs: torch.Tensor) -> torch.Tensor:
        """``(num_envs, actor_sequences, horizon, act_dim)``: the actor's deterministic actions along model draws,
        each step through a random elite (arc.py: ``get_forward_prediction_random_ensemble_t``).
        """
        c = self.config
        b, n = obs.shape[0], c.actor_sequences
        out = torch.empty((b, n, c.horizon, self.act_dim), device=self.device)
        if n == 0:
            return out
        state = obs.unsqueeze(1).expand(b, n, obs.shape[1]).reshape(b * n, -1)
        zero = torch.zeros((b * n, self.act_dim), device=self.device)
        for t in range(c.horizon):
            action = self.agent.rollout_act(state, zero).float()
            action = torch.where(torch.isfinite(action), action, self.middle)  # a model state the actor made NaN of
            out[:, :, t] = action.view(b, n, self.act_dim)
            if t < c.horizon - 1:
                state = self.ensemble.sample(state, action, self.generator)[0]
        return out

    def scores(self, obs: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
        """Each sequence's score ``(num_envs, candidates)``: the mean over elites and particles of its model
        rewards before the last step plus the critics' value at the last, each zeroed once a step before it
        was predicted to terminate.
        """
        b, candidates, h, _ = seqs.shape
        e, p, obs_dim = self.ensemble.num_elites, self.config.particles, obs.shape[1]
        rows = b * candidates * p
        state = obs.view(b, 1, 1, obs_dim).expand(b, candidates, p, obs_dim).reshape(1, rows, obs_dim)
        state = state.expand(e, rows, obs_dim)
        actions = seqs.unsqueeze(2).expand(b, candidates, p, h, self.act_dim).reshape(rows, h, self.act_dim)
        params, _ = self.ensemble.inference_params(self.ensemble.elite_index)
        total = torch.zeros((e, rows), device=self.device)
        alive = torch.ones((e, rows), dtype=torch.bool, device=self.device)
        for t in range(h - 1):
            action = actions[:, t].expand(e, rows, self.act_dim)
            x = self.ensemble.normalizer.normalize(self.ensemble.inputs(state, action))
            mean, logvar, logit = self.ensemble.raw(x, params)
            noise = torch.randn(mean.shape, generator=self.generator, device=self.device)
            draw = mean + (0.5 * logvar).exp() * noise
            next_state = state + draw[..., :obs_dim]
            flat = (state.reshape(-1, obs_dim), action.reshape(-1, self.act_dim), next_state.reshape(-1, obs_dim))
            reward = draw[..., -1] if self.reward is None else self.reward(*flat).view(e, rows)
            total += torch.where(alive, reward, 0.0)
            if self.termination is not None:
                terminated = self.termination(*flat).view(e, rows)
            else:
                assert logit is not None  # checked at construction: the ensemble has a termination head
                terminated = logit > 0
            alive &= ~terminated
            state = next_state
        last = actions[:, h - 1].expand(e, rows, self.act_dim)
        value = self.agent.action_value(state.reshape(-1, obs_dim), last.reshape(-1, self.act_dim),
                                        first=self.config.value == "first").view(e, rows)
        total += torch.where(alive, value.float(), 0.0)
        return total.view(e, b, candidates, p).mean((0, 3))
