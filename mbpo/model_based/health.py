"""Is the model paying? The figures an MBPO user watches, measured on real data the model has not trained on.

Before each model training, the transitions collected since the previous one are new to the ensemble.
On them this module measures the elites' mean prediction (:func:`ensemble_step`):

* one-step error per output: the state delta and the reward as a normalised MSE (the MSE divided by the
  target's variance over the whole real buffer, averaged over state dims: 0 is exact, about 1 is no better
  than predicting the average, a random model is far above 1; constant targets are left out, a constant
  reward's error is NaN), and termination as the fraction of rows whose predicted flag (the known rule on
  the predicted next state, or the learned head) is wrong;
* open-loop error along real trajectories: from a real state, the model is stepped with the real actions
  for 1 and 5 steps and compared with the real states, normalised like the state delta (so the 1-step
  figure equals the one-step delta error on the same rows, and the 5-step one shows the compounding);
* the real termination rate of those transitions, to set beside the rollouts' (mbpo.model_based.learner).

Trajectories are found by matching each row's next observation with another row's observation (exact
bits), so the check needs no knowledge of how collectors interleaved their batches; an episode's last
transition (terminated, or auto-reset with the final observation kept) matches nothing and ends a window.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["StepFn", "ensemble_step", "one_step_errors", "open_loop_errors", "successors", "OPEN_LOOP_HORIZONS",
           "CONSTANT_VAR"]

StepFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""``(obs (B, obs_dim), action) -> (next_obs (B, obs_dim), reward (B,), terminated bool (B,))``, deterministic."""

OPEN_LOOP_HORIZONS = (1, 5)
CONSTANT_VAR = 1e-10
"""A target whose variance over the real data is at most this is constant (CartPole's reward, a padding or
fixed-command dimension): an error relative to it means nothing, so such dims are left out of the state
errors and a constant reward's error is NaN."""


def ensemble_step(ensemble: object, termination: Callable[..., torch.Tensor] | None,
                  reward_fn: Callable[..., torch.Tensor] | None = None) -> StepFn:
    """The ensemble as a deterministic model: the mean over its elites of each elite's mean prediction;
    termination by the task's rule on the predicted next state, else the elites' mean logit > 0; the reward
    by the task's rule where one is given (the ensemble then has no reward output), else predicted.
    """

    def step(obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pred = ensemble.predict(obs, action)  # type: ignore[attr-defined]
        elites = torch.as_tensor(ensemble.elites, device=obs.device)  # type: ignore[attr-defined]
        mean = pred.mean.index_select(0, elites).mean(0)
        next_obs = obs + mean[:, : obs.shape[-1]]
        reward = mean[:, -1] if reward_fn is None else reward_fn(obs, action, next_obs).reshape(-1).float()
        if termination is not None:
            terminated = termination(obs, action, next_obs)
        elif pred.terminated_logit is not None:
            terminated = pred.terminated_logit.index_select(0, elites).mean(0) > 0
        else:
            terminated = torch.zeros(obs.shape[0], dtype=torch.bool, device=obs.device)
        return next_obs, reward, terminated

    return step


def one_step_errors(
    step: StepFn, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor, next_obs: torch.Tensor,
    terminated: torch.Tensor, delta_var: torch.Tensor, reward_var: torch.Tensor,
    next_obs_valid: torch.Tensor | None = None,
) -> dict[str, float]:  # fmt: skip
    """Normalised MSE of the state delta and of the reward, and the termination error rate, on ``N`` rows.

    ``delta_var`` ``(obs_dim,)`` / ``reward_var`` ``()``: the targets' variances the errors are divided by
    (constant ones, :data:`CONSTANT_VAR`, are left out). Rows whose true next state is unknown
    (``next_obs_valid`` False) count for reward and termination only.
    """
    pred_next, pred_reward, pred_term = step(obs, action)
    valid = torch.ones_like(terminated, dtype=torch.bool) if next_obs_valid is None else next_obs_valid
    sq = _normalised((pred_next.float() - next_obs.float()).square(), delta_var)
    delta = sq[valid].mean() if bool(valid.any()) and sq.shape[-1] else torch.tensor(float("nan"))
    reward_err = (pred_reward.float() - reward.float()).square().mean() / reward_var
    if not float(reward_var) > CONSTANT_VAR:
        reward_err = torch.tensor(float("nan"))
    term_err = (pred_term.bool() != terminated.bool()).float().mean()
    return {"delta": float(delta), "reward": float(reward_err), "termination": float(term_err)}


def successors(obs: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
    """Index of the row that continues each row's trajectory (its ``obs`` is this row's ``next_obs``,
    bit for bit), or -1: a terminated row, an episode's last row, or one whose successor is not among these.
    """
    rows = {bytes(r): i for i, r in enumerate(obs.detach().cpu().contiguous().numpy())}
    nxt = next_obs.detach().cpu().contiguous().numpy()
    done = terminated.detach().cpu().bool().tolist()
    found = [-1 if done[i] else rows.get(bytes(r), -1) for i, r in enumerate(nxt)]
    return torch.tensor(found, dtype=torch.long, device=obs.device)


def open_loop_errors(
    step: StepFn, obs: torch.Tensor, action: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
    delta_var: torch.Tensor, horizons: tuple[int, ...] = OPEN_LOOP_HORIZONS,
) -> dict[int, float]:  # fmt: skip
    """Normalised MSE of the model's state after ``k`` open-loop steps with the real actions, for each ``k``
    in ``horizons``, over every window of ``max(horizons)`` consecutive real transitions among the rows
    (NaN where there is none). A prediction that leaves the finite numbers counts as infinitely wrong.
    """
    succ = successors(obs, next_obs, terminated)
    longest = max(horizons)
    chain = [torch.arange(obs.shape[0], device=obs.device)]  # chain[k][w]: the row of step k of window w
    for _ in range(longest - 1):
        prev = chain[-1]
        chain.append(torch.where(prev >= 0, succ[prev.clamp(min=0)], prev))
    starts = (chain[-1] >= 0).nonzero().squeeze(-1)
    if starts.numel() == 0:
        return {k: float("nan") for k in horizons}
    rows = torch.stack([c[starts] for c in chain])  # [longest, W]
    state = obs[rows[0]].float()
    out: dict[int, float] = {}
    for k in range(1, longest + 1):
        state, _, _ = step(state, action[rows[k - 1]])
        state = state.float()
        if k in horizons:
            err = _normalised((state - next_obs[rows[k - 1]].float()).square(), delta_var)
            err = torch.where(torch.isfinite(err), err, torch.inf)
            out[k] = float(err.mean()) if err.shape[-1] else float("nan")
    return out


def _normalised(squared: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """``squared (N, D) / var (D,)`` over the dims whose variance is not constant (``(N, D')``)."""
    keep = var > CONSTANT_VAR
    return squared[:, keep] / var[keep]
