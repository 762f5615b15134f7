"""Branched model rollouts: short imagined trajectories that start from real states.

MBPO (Janner et al. 2019) trains the policy mostly on these. Each start state
is sampled from the real buffer; every step, each branch goes through a
uniformly random elite of the ensemble (``DynamicsEnsemble.sample``) with the
learner's own exploring policy. A branch ends when it terminates (the task's
termination rule, else the ensemble's learned termination head; see
mbpo.models.rules), or when the model predicts a non-finite or absurdly large
state or reward: that transition is dropped, counted, and never reaches the
model buffer. A given reward rule replaces the ensemble's reward. With ``keep_fraction`` below 1 (M2AC's
masking), each step keeps only that fraction of its live branches, those whose step the elites are surest
of; the others end there, unstored. With an :class:`UncertaintyThreshold` (MACURA), a branch goes on while
the elites' disagreement on its step stays below a threshold set from the first step's, and ends unstored
at the first step where it does not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from tensordict import TensorDict

from mbpo.data.transitions import MODEL_VERSION, transitions
from mbpo.model_based.multi_step import BRANCH
from mbpo.models.ensemble import ROW_QUANTUM
from mbpo.models.rules import RuleFn
from mbpo.models.sampling import ScoreFn, pairwise_gjs

__all__ = ["rollout_length", "branched_rollouts", "RolloutStats", "RolloutPolicy", "UncertaintyThreshold",
           "obs_limit_from", "rollout_bytes"]

CPU_POLICY_ROWS = 2048
"""Rows per policy forward in a rollout on CPU, as the ensemble's ``_CPU_ROW_BLOCK``: the activations stay in
cache, and the heap does not grow by a fresh 10 MB buffer per layer (the default run: peak RSS 0.85 GB instead
of 1.09 GB, and faster; docs/notes/rollout-memory.md)."""
ABSURD_FACTOR = 10.0
"""A predicted state is absurd beyond this many times the largest |value| seen in real data (+1) per dim."""


class EnsembleLike(Protocol):
    version: int

    def sample(
        self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator, batch_size: int | None = None,
        deterministic: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]: ...

    def sample_scored(
        self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator, batch_size: int | None = None,
        deterministic: bool = False, measure: ScoreFn | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]: ...


class RolloutPolicy(Protocol):
    """What rollouts act with (the agents): noise for every branch of a step at once, then actions for any
    subset of rows, so the actions do not depend on how the branches are chunked.
    """

    def rollout_noise(self, n: int, generator: torch.Generator) -> torch.Tensor: ...

    def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor: ...


@dataclass
class RolloutStats:
    started: int
    """Branches started (start states)."""
    stored: int
    """Model transitions written to the model buffer."""
    nonfinite: int
    """Branches ended because the model predicted a non-finite or absurd state or reward."""
    terminated: int
    """Branches ended by (predicted) termination."""
    length: int
    """Rollout length used (steps per branch at most)."""
    masked: int = 0
    """Branches ended, unstored, for the elites' disagreement on their step: less sure than the kept ones
    (keep_fraction), or at or above MACURA's threshold (:class:`UncertaintyThreshold`)."""
    uncertainty_border: float | None = None
    """MACURA: this rollout's ``scale`` times the ``quantile`` of its first step's uncertainties (None: off, or
    no live branch at the first step)."""
    uncertainty_threshold: float | None = None
    """MACURA: the threshold the branches' uncertainties were held below (None: off, or no live first step)."""
    stopped: bool = False
    """``should_stop()`` ended the rollout between two steps: the rows stored so far are all it made."""


@dataclass(frozen=True)
class UncertaintyThreshold:
    """MACURA's rule for where a branch ends (Frauenknecht, Eisele, Subhasish, Solowjow, Trimpe 2024, ICML,
    "Trust the Model Where It Trusts Itself: Model-Based Actor-Critic with Uncertainty-Aware Rollout Adaption";
    the authors' code: github.com/Data-Science-in-Mechanical-Engineering/macura, mbrl/algorithms/macura.py,
    ``rollout_model_and_populate_sac_buffer``). Each step's uncertainty is :func:`pairwise_gjs`. The border of a
    rollout is ``scale`` (their xi) times the ``quantile`` (their zeta / 100) of its first step's uncertainties
    (numpy's linear quantile, over the branches not dropped as absurd); the threshold is the mean of that
    border and ``past``, the borders of the rollouts before it (their running mean over
    ``unc_tresh_run_avg_history`` rollouts). A branch's step is stored, and the branch goes on, while its
    uncertainty is below the threshold (strictly, as theirs); at the first step where it is not, the branch
    ends there unstored: the first step included. Deviation: the elites draw each step and measure the
    disagreement; theirs draw and measure with all members of the ensemble (7, of which 5 elites).
    """

    quantile: float
    scale: float
    past: tuple[float, ...] = ()


def rollout_length(schedule: list[int], epoch: float) -> int:
    """MBPO's linear schedule ``[start_epoch, end_epoch, start_len, end_len]``, evaluated at ``epoch``."""
    start_epoch, end_epoch, start_len, end_len = schedule
    if epoch <= start_epoch or end_epoch == start_epoch:
        return int(start_len if epoch <= start_epoch else end_len)
    frac = min((epoch - start_epoch) / (end_epoch - start_epoch), 1.0)
    return int(start_len + frac * (end_len - start_len))


def rollout_bytes(num_starts: int, batch_size: int, row_bytes: int, obs_dim: int, act_dim: int, widest: int,
                  device: torch.device) -> int:
    """About the peak working memory of :func:`branched_rollouts` beyond the model buffer (a start-up estimate).

    Per live branch, whatever the chunking: obs and next obs, action and its noise, the ensemble's inputs,
    deal and Gaussian draw, one stored transition (``row_bytes``) before it reaches the sink. Per row of one
    forward (``batch_size`` rows, fewer on CPU): a few fp32 activations of the widest hidden layer of the
    ensemble or the policy.
    """
    in_dim = obs_dim + act_dim
    per_branch = row_bytes + 4 * (2 * obs_dim + 2 * act_dim + 2 * in_dim + 2 * (obs_dim + 1)) + 4 * 8
    rows = min(num_starts, batch_size, CPU_POLICY_ROWS if device.type == "cpu" else batch_size)
    return num_starts * per_branch + rows * 4 * 4 * widest


def obs_limit_from(real_obs: torch.Tensor) -> torch.Tensor:
    """Per-dimension bound beyond which a predicted observation is absurd."""
    return real_obs.abs().amax(dim=0) * ABSURD_FACTOR + 1.0


def branched_rollouts(
    start_obs: torch.Tensor,
    length: int,
    policy: RolloutPolicy,
    ensemble: EnsembleLike,
    termination: RuleFn | None,
    obs_limit: torch.Tensor,
    generator: torch.Generator,
    *,
    reward: RuleFn | None = None,
    batch_size: int | None = None,
    sink: Callable[[TensorDict], None] | None = None,
    deterministic: bool = False,
    keep_fraction: float = 1.0,
    uncertainty: UncertaintyThreshold | None = None,
    branch_ids: bool = False,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[TensorDict, RolloutStats]:
    """Roll ``length`` model steps from every row of ``start_obs``; return the kept transitions.

    ``termination`` is the task's termination rule ``(obs, action, next_obs) -> bool``; None means the
    ensemble's learned termination logit decides (logit > 0). ``reward``, the task's reward rule, replaces
    the ensemble's (which is then not learned). ``deterministic``: each step is its elite's mean prediction
    (mbrl-lib's ``sample=False``), not a Gaussian draw. Transitions carry ``model_version``.

    Memory: each step draws its randomness for every live branch at once (policy noise, then the
    ensemble's elite deal and Gaussian noise), then runs the policy and the ensemble on at most
    ``batch_size`` branches at a time (None = no bound; on CPU the forwards take cache-sized blocks
    anyway), so activations are bounded and, with the same generator, no result depends on
    ``batch_size``. The task's rules see a whole step at once. With ``sink`` each step's transitions go there as
    soon as they exist (the model buffer: no copy of the whole rollout is held) and the returned batch is
    empty. One host sync per step (dropping ended branches), and one more with ``keep_fraction`` < 1.

    ``keep_fraction`` < 1 (M2AC, Pan et al. 2020, its masking rate): of each step's branches that are not
    absurd, only the ``floor(keep_fraction * n)`` of lowest uncertainty (the one-vs-rest KL of
    :func:`mbpo.models.sampling.one_vs_rest_kl`) are stored and go on; the rest end, counted in ``masked``.
    Every elite then predicts every branch. (M2AC's own code rolls masked branches on, unstored; here a step
    the model is unsure of seeds no further steps.)

    ``uncertainty`` (MACURA; :class:`UncertaintyThreshold`): ``length`` is then the longest a branch may get;
    a branch ends, unstored and counted in ``masked``, at its first step whose :func:`pairwise_gjs` is not
    below the threshold set at the first step (two more host syncs there). Every elite predicts every branch,
    and a branch's elite and noise are those of the plain path, as with ``keep_fraction``.

    ``branch_ids``: each transition carries its branch (its row of ``start_obs``) under
    :data:`mbpo.model_based.multi_step.BRANCH`, for a sink that follows branches (n-step model transitions).
    ``should_stop()``, checked before each step, ends the rollout there (``stats.stopped``).
    """
    if keep_fraction < 1.0 and uncertainty is not None:
        raise ValueError("keep_fraction < 1 (M2AC) and an uncertainty threshold (MACURA) both end branches by the "
                         "elites' disagreement; pass one of the two")
    obs = start_obs
    pieces: list[TensorDict] = []
    stats = RolloutStats(started=start_obs.shape[0], stored=0, nonfinite=0, terminated=0, length=length)
    threshold: float | None = None
    branch = torch.arange(start_obs.shape[0], device=start_obs.device) if branch_ids else None
    for _ in range(length):
        if obs.shape[0] == 0:
            break
        if should_stop is not None and should_stop():  # a stopping run: a step of 100,000 branches takes seconds
            stats.stopped = True
            break
        action = _act(policy, obs, policy.rollout_noise(obs.shape[0], generator), batch_size)
        score = None
        if keep_fraction < 1.0:
            next_obs, model_reward, term_logit, score = ensemble.sample_scored(obs, action, generator, batch_size,
                                                                               deterministic)
        elif uncertainty is not None:
            next_obs, model_reward, term_logit, score = ensemble.sample_scored(
                obs, action, generator, batch_size, deterministic, measure=pairwise_gjs)
        else:
            next_obs, model_reward, term_logit = ensemble.sample(obs, action, generator, batch_size, deterministic)
        step_reward = reward(obs, action, next_obs) if reward is not None else model_reward
        if step_reward is None:
            raise ValueError("the ensemble learns no reward and no reward function was given: cannot reward branches")
        if termination is not None:
            terminated = termination(obs, action, next_obs)
        elif term_logit is not None:
            terminated = term_logit > 0
        else:
            raise ValueError("no termination function and no learned termination head: cannot end branches")
        bad = (~torch.isfinite(next_obs).all(-1) | ~torch.isfinite(step_reward)
               | (next_obs.abs() > obs_limit).any(-1))
        keep, unsure = ~bad, None
        if score is not None and uncertainty is None:
            keep, n_masked = _most_certain(score, keep, keep_fraction)  # the step's other host sync
            stats.masked += n_masked
        elif score is not None and uncertainty is not None:
            if threshold is None:  # the first step sets the threshold: its other host syncs
                border = uncertainty.scale * _quantile(score[keep], uncertainty.quantile)
                threshold = (border + sum(uncertainty.past)) / (len(uncertainty.past) + 1)
                if not math.isnan(border):
                    stats.uncertainty_border, stats.uncertainty_threshold = border, threshold
            unsure = keep & ~(score < threshold)  # a NaN score is unsure
            keep = keep & ~unsure
        terminated = terminated & keep
        counts = [bad.sum(), terminated.sum()] + ([] if unsure is None else [unsure.sum()])
        n_bad, n_term, *n_unsure = (int(x) for x in torch.stack(counts).tolist())
        stats.nonfinite, stats.terminated = stats.nonfinite + n_bad, stats.terminated + n_term
        stats.masked += sum(n_unsure)
        step = transitions(obs, action, step_reward, next_obs, terminated)[keep]
        step[MODEL_VERSION] = torch.full((step.shape[0],), ensemble.version, dtype=torch.int64, device=obs.device)
        if branch is not None:
            step[BRANCH] = branch[keep]
            branch = branch[keep & ~terminated]
        stats.stored += step.shape[0]
        if sink is not None:
            sink(step)
        else:
            pieces.append(step)
        obs = next_obs[keep & ~terminated]
    batch = torch.cat(pieces) if pieces else TensorDict({}, batch_size=[0])
    return batch, stats


def _most_certain(score: torch.Tensor, live: torch.Tensor, keep_fraction: float) -> tuple[torch.Tensor, int]:
    """The ``floor(keep_fraction * live.sum())`` rows of ``live`` with the lowest ``score`` (a non-finite score
    ranks last; ties: the earlier row), as a mask, and how many live rows it leaves out. Only live rows are
    ranked, so a dead row never comes back whatever the scores.
    """
    alive = live.nonzero().squeeze(1)  # a host sync
    n = int(keep_fraction * alive.shape[0] + 1e-9)  # 0.29 * 100 is 28.999...: still 29
    ranked = score[alive].nan_to_num(nan=float("inf")).argsort(stable=True)[:n]
    trusted = torch.zeros_like(live)
    trusted[alive[ranked]] = True
    return trusted, alive.shape[0] - n


def _quantile(x: torch.Tensor, q: float) -> float:
    """The ``q``-quantile of the 1-D ``x`` by numpy's default (linear) rule, as MACURA's ``np.percentile``; a
    NaN ranks as +inf; NaN for an empty ``x``. By k-th values: ``torch.quantile`` refuses over 2**24 elements.
    """
    n = x.numel()
    if n == 0:
        return math.nan
    x = torch.where(torch.isnan(x), math.inf, x)
    position = q * (n - 1)
    low = min(int(position), n - 1)
    high = min(low + 1, n - 1)
    a, b = torch.stack((x.kthvalue(low + 1).values, x.kthvalue(high + 1).values)).double().tolist()
    frac = position - low
    return a if frac == 0 or a == b else a + frac * (b - a)


def _act(policy: RolloutPolicy, obs: torch.Tensor, noise: torch.Tensor, batch_size: int | None) -> torch.Tensor:
    """``policy.rollout_act`` on at most ``batch_size`` rows at a time (``CPU_POLICY_ROWS`` on CPU), each
    piece padded to whole ``ROW_QUANTUM`` tiles (by repeating its first row) so that no action depends on
    the chunking.
    """
    n = obs.shape[0]
    step = n if batch_size is None else batch_size
    if obs.device.type == "cpu":
        step = min(step, CPU_POLICY_ROWS)
    step = max(step // ROW_QUANTUM, 1) * ROW_QUANTUM
    parts = []
    for s in range(0, n, step):
        o, z = obs[s : s + step], noise[s : s + step]
        rows, pad = o.shape[0], -o.shape[0] % ROW_QUANTUM
        if pad:
            o = torch.cat((o, o[:1].expand(pad, *o.shape[1:])))
            z = torch.cat((z, z[:1].expand(pad, *z.shape[1:])))
        parts.append(policy.rollout_act(o, z)[:rows])
    return parts[0] if len(parts) == 1 else torch.cat(parts)
