"""The model-based half of MBPO, as one component the trainer calls twice per vector step.

``after_collect`` trains the dynamics ensemble every ``model.train_freq`` real
transitions from ``agent.learning_starts`` on (the paper's code fits its first
model on the random-action data, right after them) and then runs branched
rollouts into the model buffer;
``policy_batches`` mixes real and model transitions by ``real_ratio``. Every
budget is per real transition, so the paper's single-env constants keep their
meaning at 4,096 envs: a vector step of N envs earns N / train_freq model
trainings (at most one per vector step), N * rollouts_per_real branches and
N * utd_ratio policy updates (the trainer's part). The realised ratios are
reported by :meth:`ModelBased.metrics`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict
from torchrl.data import ReplayBuffer

from envs.device import restore_generator
from mbpo.config import DEFAULT_ROLLOUTS_PER_REAL, ModelConfig
from mbpo.config.seeding import derive
from mbpo.data.replay import ModelBuffer, newest_indices, rows_written, sample_batches, sample_real
from mbpo.data.transitions import (
    ACTION,
    DISCOUNT,
    NEXT_OBS,
    NEXT_OBS_VALID,
    OBS,
    REWARD,
    TERMINATED,
    TRANSITION_KEYS,
    first_step_view,
)
from mbpo.device.checks import check_indices, check_transitions
from mbpo.device.memory import release_free_memory
from mbpo.errors import MbpoError
from mbpo.model_based.budgets import budget_start, trainings_earned
from mbpo.model_based.health import OPEN_LOOP_HORIZONS, ensemble_step, one_step_errors, open_loop_errors
from mbpo.model_based.multi_step import NStepBranches
from mbpo.model_based.rollouts import (
    RolloutPolicy,
    RolloutStats,
    UncertaintyThreshold,
    branched_rollouts,
    obs_limit_from,
    rollout_length,
)
from mbpo.models.ensemble import DynamicsEnsemble
from mbpo.models.rules import check_rules, model_rules

__all__ = ["ModelBased", "MAX_HEALTH_ROWS"]

MAX_HEALTH_ROWS = 5_000
"""The model's health is measured on at most this many of the newest real transitions (model.max_holdout's size)."""


class ModelBased:
    """Dynamics ensemble + the task's rules + model buffer + the MBPO budgets.

    ``env`` is the training env object: a ``termination_fn`` / ``reward_fn`` it (or the user's env
    it wraps) defines is used unless the config names its own (mbpo.models.rules).
    """

    def __init__(
        self,
        config: ModelConfig,
        env_id: str,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Space,
        device: torch.device,
        seed: int,
        rollouts_per_real: float | None = None,
        learning_starts: int = 0,
        env: object | None = None,
        num_envs: int = 1,
        gamma: float | None = None,
    ) -> None:
        self.config = config
        self.gamma: float = float("nan") if gamma is None else gamma
        """The learner's discount: model.rollout_n_step > 1 discounts the rewards of its n-step model transitions
        (not needed, and NaN when not given, for 1-step ones)."""
        if config.rollout_n_step > 1 and gamma is None:
            raise ValueError(f"model.rollout_n_step={config.rollout_n_step} needs the learner's gamma")
        self.num_envs = num_envs
        """Transitions per vector step: at most one training per vector step (:func:`trainings_earned`)."""
        self.clock_start = learning_starts
        """Where the rollout schedule's epochs count from: agent.learning_starts (0 in a run checkpointed before
        that rule, which keeps its own clock when resumed)."""
        self.rollouts_per_real: float = (
            rollouts_per_real if rollouts_per_real is not None
            else config.rollouts_per_real if config.rollouts_per_real is not None else DEFAULT_ROLLOUTS_PER_REAL)
        """Branches started per real transition in effect (the trainer passes config.rollouts_per_transition)."""
        self.device = device
        self.obs_dim, self.action_space = int(observation_space.shape[0]), action_space
        self.rules = model_rules(config, env_id, env)
        self.termination, self.reward = self.rules.termination, self.rules.reward
        """The task's rules in effect; None = the ensemble learns that one."""
        self.ensemble = DynamicsEnsemble(
            config, int(observation_space.shape[0]), action_space, device, seed=seed,
            learn_termination=self.termination is None, learn_reward=self.reward is None,
            precision=config.precision,
        )
        self.generator = torch.Generator(device=device).manual_seed(derive(seed, "rollouts"))  # starts, branches
        self.batch_generator = torch.Generator(device=device).manual_seed(derive(seed, "batches"))  # the learner's
        self.rollout_len = rollout_length(config.rollout_schedule, 0)
        self.model_buffer = ModelBuffer(self._capacity(self.rollout_len), device)
        self.trainings = 0
        self.trainings_folded = 0
        """Owed trainings a fit counted for beside its own (model.max_lag above 1, async trainer)."""
        self.rollouts_started = 0
        self.capped_rollouts = 0
        """Rollouts that started fewer branches than owed, as many as the model buffer holds whole."""
        self.nonfinite_branches = 0
        self.budget_start = budget_start(config.train_freq, learning_starts)
        """Where the model's training and rollout budgets start counting (:func:`budget_start`)."""
        self.last_rollout_env_steps = self.budget_start
        """Env steps at the last rollouts."""
        self.last_fit: dict[str, Any] = {}
        self.last_train_env_steps = 0
        """Env steps at the last training."""
        self.last_train_rows = 0
        """Real rows written at the last training: the rows written since are new to the ensemble (fewer than the
        env steps when transitions were dropped as non-finite, or held back for n-step returns)."""
        self._rows_at_copy = 0
        self.fit_pending = False
        """The last fit was cut short by a stop: it is not counted, no rollouts came from its half-fitted
        ensemble, and the next chance to train (a resume) fits again, on or off a ``train_freq`` boundary."""
        self.fit_counts = {"capped": 0, "members_discarded": 0, "members_below_pre_fit": 0}
        """Summed over the run: trainings stopped by max_grad_steps/max_epochs, members that kept their old
        weights (fit_baseline=pre_fit), members whose kept weights did not beat their pre-fit holdout MSE by 1%."""
        self.health: dict[str, float] = {}
        """The last measurement of :mod:`mbpo.model_based.health` on the rows that were new to the ensemble."""
        self.last_rollout: RolloutStats | None = None
        self.uncertainty_borders: list[float] = []
        """model.macura: the borders of the last ``macura_history - 1`` rollouts, which its threshold averages."""
        self.lock = threading.Lock()
        """Guards the model buffer: the async model thread writes it while the learner samples it."""
        self.buffer_ready: torch.cuda.Event | None = None
        """CUDA event recorded after the newest rollouts were written (None on CPU)."""
        self.debug = False
        """Host-side bounds checks on start-state and elite indices (debug mode)."""
        self.acting: dict[str, Any] | None = self.ensemble.acting_state() if config.lookahead.enabled else None
        """model.lookahead: the ensemble as of its last finished fit, for the planners' replicas (published with
        the policy's weights); replaced, never mutated, so a reader on another thread holds a consistent copy."""

    def _branches(self, env_steps: int) -> int:
        """The branches ``env_steps`` real transitions are budgeted, ``rollouts_per_real`` each, in exact
        arithmetic (``rollouts_per_vector_step`` 1,000 over 3 envs is 1000/3 a transition, not 333.33...).
        """
        return math.floor(Fraction(self.rollouts_per_real).limit_denominator(10**6) * max(env_steps, 0))

    def _branches_owed(self, env_steps: int) -> tuple[int, int | None]:
        """``rollouts_per_real`` per real transition since the last rollouts, the fractions carried over (a budget
        of 0.5 branches per step starts one every other step, not none): the whole budget to ``env_steps``, less
        the whole budget to the last rollouts; and None, or, where a fit covered more than the model buffer keeps
        (``epoch_length`` x ``retain_epochs`` env steps), that count while what it keeps is started, at least one
        branch: the rest would overwrite this rollout's own first steps, the ones nearest real states.
        """
        covered, kept = env_steps - self.last_rollout_env_steps, self.config.epoch_length * self.config.retain_epochs
        owed = self._branches(env_steps - self.budget_start) - self._branches(self.last_rollout_env_steps -
                                                                               self.budget_start)
        return (owed, None) if covered <= kept else (max(self._branches(kept), 1), owed)

    def _count_capped(self, covered: int, started: int, owed: int) -> None:
        """A rollout that started fewer branches than owed (:meth:`_branches_owed`): counted, and said once."""
        if not self.capped_rollouts:
            kept = self.config.epoch_length * self.config.retain_epochs
            print(f"[mbpo] note: a model fit covered {covered:,} env steps, more than the model buffer keeps "
                  f"(model.epoch_length x model.retain_epochs = {kept:,}): its rollouts started {started:,} branches, "
                  f"not {owed:,}, so that the buffer holds every step of them (raise model.retain_epochs to keep "
                  "more; model_rollouts_capped counts such rollouts)", file=sys.stderr)
        self.capped_rollouts += 1

    def _capacity(self, length: int) -> int:
        """Room for ``retain_epochs`` epochs of rollouts at this length (MBPO's model buffer size)."""
        c = self.config
        return max(1, int(self.rollouts_per_real * c.epoch_length * length * c.retain_epochs))

    # -- the two calls the trainer makes -------------------------------------------
    def after_collect(self, before: int, after: int, real: ReplayBuffer, policy: RolloutPolicy,
                      should_stop: Callable[[], bool] | None = None) -> bool:
        """Train the ensemble and roll out if env steps crossed a multiple of ``train_freq`` (or a fit is
        pending); ``should_stop()`` (checked every gradient step) cuts the fit short, keeping each member's best
        epoch so far, and then no rollouts are made: the run is stopping, and its resume fits again.
        """
        due = trainings_earned(after, self.config.train_freq, self.budget_start, self.num_envs)
        crossed = due > trainings_earned(before, self.config.train_freq, self.budget_start, self.num_envs)
        if not (crossed or self.fit_pending) or len(real) < 2:
            return False
        data = real[: len(real)]
        self.train(data, after, should_stop=should_stop, fresh=self.fresh_rows(real))
        if not self.fit_pending:
            self.rollout(data, after, policy, self.start_rows(real))
        return True

    @property
    def rollouts_owed(self) -> bool:
        """The last fit is done but its rollouts are not (the async model thread stopped between them)."""
        return self.trainings > 0 and not self.fit_pending and self.last_rollout_env_steps < self.last_train_env_steps

    def epoch(self, env_steps: int) -> float:
        """MBPO epochs (of ``epoch_length`` real transitions) since ``learning_starts``, as the paper's code counts
        them (its epochs start after the random steps): the clock of ``rollout_schedule``.
        """
        return max(env_steps - self.clock_start, 0) / self.config.epoch_length

    def fresh_rows(self, real: ReplayBuffer) -> torch.Tensor:
        """Indices (into ``real[: len(real)]``) of the real rows written since the last training (at most
        :data:`MAX_HEALTH_ROWS`); call it where the training's copy of ``real`` is taken.
        """
        self._rows_at_copy = rows_written(real)
        return newest_indices(real, min(self._rows_at_copy - self.last_train_rows, MAX_HEALTH_ROWS))

    def start_rows(self, real: ReplayBuffer) -> torch.Tensor | None:
        """Indices (into ``real[: len(real)]``) of the rows branches may start from: the newest
        ``model.rollout_start_window``, or None for all of them (MBPO); call it where the copy of ``real`` is taken.
        """
        window = self.config.rollout_start_window
        return newest_indices(real, window) if 0 < window < len(real) else None

    def train(self, data: TensorDict, env_steps: int, should_stop: Callable[[], bool] | None = None,
              fresh: torch.Tensor | None = None) -> None:
        """Fit the ensemble on the real ``data`` (``env_steps`` real transitions collected so far); first, with
        ``fresh`` (indices of the rows collected since the last training), measure the model's health on them.
        """
        c = self.config
        data = first_step_view(data)  # n-step rows: the model learns their first step
        if fresh is not None and self.trainings > 0 and fresh.numel() >= 2 and not self.fit_pending:
            self.health = self.measure_health(data, fresh)  # (a cut-short fit has trained on them: kept from before)
        # A next obs the env did not give us (an auto-reset that lost it) is never a model target; its
        # reward and termination are, so the row still trains those heads.
        valid = data[NEXT_OBS_VALID] if NEXT_OBS_VALID in data.keys() else None
        self.last_fit = self.ensemble.fit(data[OBS], data[ACTION], data[REWARD], data[NEXT_OBS], data[TERMINATED],
                                          should_stop=should_stop, next_obs_valid=valid)
        self.fit_pending = self.last_fit.get("stopped_by") == "stop"
        if self.fit_pending:  # counted (and its rollouts made) when it is redone
            return
        self.trainings += 1
        self.last_train_env_steps, self.last_train_rows = env_steps, self._rows_at_copy
        for key in self.fit_counts:
            self.fit_counts[key] += int(self.last_fit.get(key, 0))
        self.rollout_len = rollout_length(c.rollout_schedule, self.epoch(env_steps))
        if self.acting is not None:
            self.acting = self.ensemble.acting_state()

    @torch.no_grad()
    def measure_health(self, data: TensorDict, fresh: torch.Tensor) -> dict[str, float]:
        """:mod:`mbpo.model_based.health` figures of the current ensemble on ``data[fresh]``, normalised by the
        variances of the targets over all of ``data``.
        """
        data = first_step_view(data)
        valid = data[NEXT_OBS_VALID] if NEXT_OBS_VALID in data.keys() else torch.ones(
            data.shape[0], dtype=torch.bool, device=self.device)
        delta = (data[NEXT_OBS] - data[OBS])[valid]
        delta_var = delta.var(0) if delta.shape[0] > 1 else torch.ones(self.obs_dim, device=self.device)
        reward_var = data[REWARD].float().var()
        rows = data[fresh]
        rows_valid = valid[fresh]
        step = ensemble_step(self.ensemble, self.termination, self.reward)
        errors = one_step_errors(step, rows[OBS], rows[ACTION], rows[REWARD], rows[NEXT_OBS], rows[TERMINATED],
                                 delta_var, reward_var, rows_valid)
        open_loop = open_loop_errors(step, rows[OBS][rows_valid], rows[ACTION][rows_valid],
                                     rows[NEXT_OBS][rows_valid], rows[TERMINATED][rows_valid], delta_var)
        return {
            "model_err_delta": errors["delta"], "model_err_reward": errors["reward"],
            "model_err_termination": errors["termination"],
            **{f"model_open_loop_err_{k}": open_loop[k] for k in OPEN_LOOP_HORIZONS},
            "real_termination_rate": float(rows[TERMINATED].float().mean()), "model_health_rows": int(fresh.numel()),
        }

    def rollout(self, data: TensorDict, env_steps: int, policy: RolloutPolicy,
                starts: torch.Tensor | None = None, should_stop: Callable[[], bool] | None = None) -> None:
        """Branched rollouts from states of the real ``data`` (uniformly from the rows ``starts`` indexes, or from
        all; :meth:`start_rows`): ``rollouts_per_real`` per real transition since the last call,
        ``model.rollout_batch_size`` at a time, each step straight into the model buffer. ``should_stop()`` ends
        them between two steps; then they count as not made (:attr:`rollouts_owed`: a resume makes them, its
        branches beside the rows this one stored).
        """
        num_starts, owed = self._branches_owed(env_steps)
        with self.lock:
            self._after_learner_reads()
            self.model_buffer.resize(self._capacity(self.rollout_len))
            self._mark_written()
        if num_starts <= 0:
            self.last_rollout_env_steps = env_steps
            return
        pool = data.shape[0] if starts is None else starts.numel()
        idx = torch.randint(pool, (num_starts,), generator=self.generator, device=self.device)
        if starts is not None:
            idx = starts.to(self.device)[idx]
        if self.debug:
            check_indices(idx, data.shape[0], "rollout start states")
            check_indices(torch.as_tensor(self.ensemble.elites), self.ensemble.ensemble_size, "elite indices")
        c = self.config
        earlier = c.macura_history - 1  # MACURA's threshold: the mean of this border and the earlier ones
        past = self.uncertainty_borders[-earlier:] if earlier else []
        n_step = None
        if c.rollout_n_step > 1:  # each step's rows go through the n-step windows into the model buffer
            action_shape = self.action_space.shape or ()
            n_step = NStepBranches(c.rollout_n_step, self.gamma, num_starts, self.obs_dim,
                                   int(action_shape[0]) if action_shape else 0, self._store, self.device,
                                   data[ACTION].dtype)
        _, stats = branched_rollouts(
            data[OBS][idx], self.rollout_len, policy, self.ensemble, self.termination, obs_limit_from(data[OBS]),
            self.generator, reward=self.reward, batch_size=c.rollout_batch_size,
            sink=self._store if n_step is None else n_step.step, branch_ids=n_step is not None,
            deterministic=c.deterministic_rollouts, keep_fraction=c.rollout_keep_fraction,
            uncertainty=UncertaintyThreshold(c.macura_quantile, c.macura_scale, tuple(past)) if c.macura else None,
            should_stop=should_stop,
        )
        if n_step is not None:
            n_step.close()
        if stats.stopped:
            return
        if owed is not None:
            self._count_capped(env_steps - self.last_rollout_env_steps, num_starts, owed)
        if stats.uncertainty_border is not None and earlier:
            self.uncertainty_borders = [*past, stats.uncertainty_border][-earlier:]
        # The env steps move with the branches they paid for: a metrics row read while the (async) rollouts run
        # sees the previous pair, not the new steps over the old count.
        self.rollouts_started, self.last_rollout_env_steps = self.rollouts_started + stats.started, env_steps
        self.nonfinite_branches += stats.nonfinite
        self.last_rollout = stats
        release_free_memory()  # the fit's and the rollouts' temporaries, freed in this thread's arena

    def _store(self, batch: TensorDict) -> None:
        """One rollout step's transitions into the model buffer (its writes ordered after the learner's reads)."""
        if self.debug and batch.shape[0]:
            check_transitions(batch, "model rollouts -> model buffer", self.device, self.obs_dim, self.action_space)
        with self.lock:
            self._after_learner_reads()
            self.model_buffer.add(batch)
            self._mark_written()

    def check_rules(self, batch: TensorDict) -> list[str]:
        """Run the task's rules on real transitions ``batch`` (start-up): a rule that returns the wrong shape,
        dtype or device, or a non-finite reward, is an MbpoError; returns a warning per rule that disagrees
        with the env on them.
        """
        return check_rules(self.rules, batch)

    def _after_learner_reads(self) -> None:
        """On CUDA, from another stream (the async model thread): order model-buffer writes after every
        read the learner has queued on the default stream, and keep the storage a resize frees alive
        until those reads are done. Called under ``lock``; a no-op on CPU and on the default stream.
        """
        if self.device.type != "cuda":
            return
        learner = torch.cuda.default_stream(self.device)
        current = torch.cuda.current_stream(self.device)
        if current != learner:
            current.wait_stream(learner)
            if self.model_buffer._data is not None:
                self.model_buffer._data.apply(lambda t: t.record_stream(learner) or t)

    def _mark_written(self) -> None:
        """An event after the newest model-buffer writes; the learner's stream waits on it before sampling."""
        if self.device.type == "cuda":
            self.buffer_ready = torch.cuda.Event()
            self.buffer_ready.record()

    def policy_batches(self, real: ReplayBuffer, batch_size: int, count: int = 1) -> tuple[TensorDict, ...]:
        """``count`` policy batches, each ``real_ratio`` real and the rest model data, from one draw per buffer.

        On CPU batch ``i`` holds exactly the transitions the ``i``-th of ``count`` single-batch draws would
        (each buffer has its own generator, consumed in order), so drawing ahead changes no result.
        """
        with self.lock:
            if self.buffer_ready is not None:
                torch.cuda.current_stream(self.device).wait_event(self.buffer_ready)
            if len(self.model_buffer) == 0:
                return sample_batches(real, batch_size, count, self.debug)
            n_real = int(batch_size * self.config.real_ratio + 1e-9)  # rounded down, as the paper (256 x 0.05 = 12)
            model = self.model_buffer.sample(count * (batch_size - n_real), self.batch_generator)
        keys = (*TRANSITION_KEYS, DISCOUNT) if DISCOUNT in model.keys() else TRANSITION_KEYS  # n-step model rows
        model = model.select(*keys).reshape(count, batch_size - n_real)
        if n_real == 0:
            return model.unbind(0)
        real_part = sample_real(real, count * n_real, self.debug)
        real_part = real_part.select(*TRANSITION_KEYS, *((DISCOUNT,) if DISCOUNT in real_part.keys() else ()))
        if DISCOUNT in keys and DISCOUNT not in real_part.keys():  # 1-step real rows: their discount is gamma
            real_part[DISCOUNT] = torch.full((count * n_real,), self.gamma, device=real_part.device)
        elif DISCOUNT in real_part.keys() and DISCOUNT not in keys:  # n-step real rows (agent.n_step), 1-step model
            model[DISCOUNT] = torch.full(model.shape, self.gamma, device=model.device)
        return torch.cat((real_part.reshape(count, n_real), model), 1).unbind(0)

    # -- reporting and state ----------------------------------------------------------
    def metrics(self, env_steps: int) -> dict[str, Any]:
        fit, roll = self.last_fit, self.last_rollout
        started = max(roll.started, 1) if roll is not None else 1
        return {
            "model_version": self.ensemble.version,
            "model_holdout_loss": fit.get("holdout_loss"),
            "model_grad_steps": fit.get("grad_steps"),
            "model_elites": " ".join(str(int(e)) for e in fit.get("elites", [])) or None,
            "rollout_length": self.rollout_len,
            "model_buffer_size": len(self.model_buffer),
            "nonfinite_branches": self.nonfinite_branches,
            "model_trainings_per_real": self.trainings / max(env_steps - self.budget_start, 1),
            "model_trainings_per_real_target": 1.0 / max(self.config.train_freq, self.num_envs),
            "rollouts_per_real_realised":
                self.rollouts_started / max(self.last_rollout_env_steps - self.budget_start, 1),
            "rollouts_per_real": self.rollouts_per_real,
            "model_rollouts_capped": self.capped_rollouts,
            "model_fit_epochs": fit.get("epochs"),
            "model_fit_stopped_by": fit.get("stopped_by"),
            "model_trainings": self.trainings,
            "model_trainings_folded": self.trainings_folded,
            **{f"model_fits_{k}" if k == "capped" else f"model_{k}": v for k, v in self.fit_counts.items()},
            **self.health,
            # the last training's rollouts: steps reached per branch, how branches ended, and the
            # per-step termination rate, to set beside real_termination_rate
            "rollout_mean_length": None if roll is None else roll.stored / started,
            "rollout_terminated_frac": None if roll is None else roll.terminated / started,
            "rollout_nonfinite_frac": None if roll is None else roll.nonfinite / started,
            "rollout_masked_frac": None if roll is None else roll.masked / started,
            "rollout_uncertainty_threshold": None if roll is None else roll.uncertainty_threshold,
            "rollout_uncertainty_border": None if roll is None else roll.uncertainty_border,
            "rollout_termination_rate": None if roll is None else roll.terminated / max(roll.stored, 1),
        }

    def _heads(self) -> dict[str, bool]:
        return {"reward": self.ensemble.learn_reward, "termination": self.ensemble.learn_termination}

    def state_dict(self) -> dict[str, Any]:
        return {
            "heads": self._heads(),
            "ensemble": self.ensemble.state_dict(),
            "model_buffer": self.model_buffer.state_dict(),
            "generator": self.generator.get_state(),
            "batch_generator": self.batch_generator.get_state(),
            "counters": {"trainings": self.trainings, "trainings_folded": self.trainings_folded,
                         "rollouts_started": self.rollouts_started, "capped_rollouts": self.capped_rollouts,
                         "nonfinite_branches": self.nonfinite_branches, "rollout_len": self.rollout_len,
                         "last_rollout_env_steps": self.last_rollout_env_steps,
                         "last_train_env_steps": self.last_train_env_steps, "last_train_rows": self.last_train_rows,
                         "fit_counts": dict(self.fit_counts),
                         "fit_pending": self.fit_pending,
                         "uncertainty_borders": list(self.uncertainty_borders),
                         "budget_start": self.budget_start, "clock_start": self.clock_start,
                         "health": dict(self.health),
                         "last_rollout": None if self.last_rollout is None else dataclasses.asdict(self.last_rollout)},
            "last_fit": dict(self.last_fit),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`; a checkpoint whose ensemble learned other heads (the task's rules
        changed: a config key, or the env's termination_fn / reward_fn) is refused.
        """
        heads = state.get("heads", {"reward": True, "termination": self.ensemble.learn_termination})
        if heads != self._heads():
            learned = {name: "learned" if on else "given" for name, on in heads.items()}
            raise MbpoError(f"the checkpoint's ensemble was built with reward {learned['reward']} and termination "
                            f"{learned['termination']}, but this run has {self.rules.describe()}; resume with the "
                            "rules the run started with (model.termination / model.reward, the env's termination_fn "
                            "/ reward_fn)")
        self.ensemble.load_state_dict(state["ensemble"])
        self.model_buffer.load_state_dict(state["model_buffer"])
        restore_generator(self.generator, state["generator"])
        restore_generator(self.batch_generator, state["batch_generator"])
        # A run checkpointed before trainings started at learning_starts counted its budgets and its epochs
        # from env step 0: it goes on counting that way.
        self.budget_start = self.clock_start = 0
        counters = state["counters"]
        self.last_train_rows = counters.get("last_train_env_steps", 0)  # older checkpoints: a row per env step
        for key, value in counters.items():
            setattr(self, key, value)
        if isinstance(self.last_rollout, dict):
            self.last_rollout = RolloutStats(**self.last_rollout)
        self.last_fit = dict(state["last_fit"])
        if self.acting is not None and not self.fit_pending:  # a fit cut short: planners wait for its redo
            self.acting = self.ensemble.acting_state()
