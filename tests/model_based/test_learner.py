"""MBPO pieces: rollout schedule, model buffer, branched rollouts, batch mixing, auto-reset boundary, learning."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import envs
from mbpo.config import load_config
from mbpo.data.replay import ModelBuffer, make_replay_buffer, sample_real
from mbpo.data.transitions import MODEL_VERSION, transitions
from mbpo.model_based.learner import ModelBased
from mbpo.model_based.rollouts import branched_rollouts, obs_limit_from, rollout_length
from mbpo.run.metrics import read_metrics
from mbpo.smoke import POINT_MASS_MBPO
from mbpo.trainers import SyncTrainer

pytestmark = pytest.mark.timeout(120)


def batch_of(values: list[float]) -> TensorDict:
    x = torch.tensor(values).unsqueeze(-1)
    return transitions(x, x, x[:, 0], x, torch.zeros(len(values), dtype=torch.bool))


def test_rollout_length_schedule() -> None:
    schedule = [20, 100, 1, 15]
    assert [rollout_length(schedule, e) for e in (0, 20, 60, 100, 300)] == [1, 1, 8, 15, 15]
    assert rollout_length([5, 5, 2, 9], 5) == 2 and rollout_length([5, 5, 2, 9], 6) == 9


def test_model_buffer_is_a_ring_that_resizes_keeping_the_newest() -> None:
    buf = ModelBuffer(4, "cpu")
    buf.add(batch_of([1, 2, 3]))
    buf.add(batch_of([4, 5, 6]))
    assert len(buf) == 4 and buf.newest(4)["obs"][:, 0].tolist() == [3, 4, 5, 6]
    buf.resize(2)
    assert buf.newest(2)["obs"][:, 0].tolist() == [5, 6]
    buf.resize(5)
    buf.add(batch_of([7]))
    assert buf.newest(5)["obs"][:, 0].tolist() == [5, 6, 7]
    state = buf.state_dict()
    other = ModelBuffer(1, "cpu")
    other.load_state_dict(state)
    assert other.newest(3)["obs"][:, 0].tolist() == [5, 6, 7]
    assert set(buf.sample(100, torch.Generator().manual_seed(0))["obs"][:, 0].tolist()) == {5.0, 6.0, 7.0}
    with pytest.raises(RuntimeError, match="empty"):
        ModelBuffer(3, "cpu").sample(1, torch.Generator())


class UniformPolicy:
    """A rollout policy: actions uniform in ``[low, high)``, one ``act_dim`` row of noise per branch."""

    def __init__(self, low: float, high: float, act_dim: int = 1) -> None:
        self.low, self.high, self.act_dim = low, high, act_dim

    def rollout_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return torch.rand(n, self.act_dim, generator=generator, device=generator.device)

    def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.low + (self.high - self.low) * noise


class DivergingEnsemble:
    """obs = [branch id, x]. Branch id % 3 == 1 predicts NaN, == 2 an absurd x, else x + 1."""

    version = 7

    def sample(
        self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator, batch_size: int | None = None,
        deterministic: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        branch, x = obs[:, 0], obs[:, 1]
        x = torch.where(branch % 3 == 1, math.nan, torch.where(branch % 3 == 2, 1e9, x + 1.0))
        return torch.stack((branch, x), -1), torch.ones(obs.shape[0]), None


def test_no_nonfinite_or_absurd_value_reaches_the_model_buffer() -> None:
    start = torch.stack((torch.arange(9.0), torch.zeros(9)), -1)
    batch, stats = branched_rollouts(
        start, 10, UniformPolicy(0.0, 0.0), DivergingEnsemble(),
        lambda o, a, n: n[:, 1] > 5, obs_limit_from(torch.tensor([[8.0, 1.0]])), torch.Generator().manual_seed(0),
    )
    assert all(bool(torch.isfinite(batch[k].float()).all()) for k in ("obs", "next_obs", "reward"))
    assert (batch["next_obs"][:, 1].abs() <= 11).all()
    assert stats.nonfinite == 6  # branches 1, 2, 4, 5, 7, 8 end at their first step
    assert stats.started == 9 and stats.terminated == 3  # branches 0, 3, 6 when x reaches 6
    assert stats.stored == 3 * 6 and (batch[MODEL_VERSION] == 7).all()
    assert sorted(batch["obs"][:, 0].unique().tolist()) == [0.0, 3.0, 6.0]


def test_real_ensemble_forced_to_diverge_never_fills_the_buffer_with_nonfinite(tmp_path: Path) -> None:
    cfg = load_config(None, ["model.enabled=true", "model.hidden_sizes=[16,16]", "model.weight_decay=[0,0,0]",
                             "model.max_epochs=2", "model.rollouts_per_real=4", "model.train_freq=50"]).model
    env = envs.make("Pendulum-v1", 1, seed=0)
    mb = ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)
    real = make_replay_buffer(1000, "cpu", torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    obs = env.reset()
    for _ in range(60):
        action = envs.random_actions(env, g)
        nxt, reward, term, trunc, info = env.step(action)
        real.extend(transitions(obs, action, reward, info["final_obs"], term))
        obs = nxt

    def diverge_then_fit(*args: object, **kwargs: object) -> dict:
        metrics = real_fit(*args, **kwargs)
        with torch.no_grad():
            for p in mb.ensemble.net.parameters():
                p.mul_(1e6)  # every prediction now explodes
        return metrics

    real_fit = mb.ensemble.fit
    mb.ensemble.fit = diverge_then_fit  # type: ignore[method-assign]  # a wrapping spy

    assert mb.after_collect(0, 60, real, UniformPolicy(-2.0, 2.0))
    assert mb.nonfinite_branches > 0
    if len(mb.model_buffer):
        data = mb.model_buffer.newest(len(mb.model_buffer))
        assert torch.isfinite(data["next_obs"]).all() and torch.isfinite(data["reward"]).all()


def test_rollouts_per_real_realised_never_dips_while_rollouts_run() -> None:
    """The async learner logs metrics while the model thread rolls out: the realised ratio it reads then is the
    previous rollouts' (their starts over their env steps), not the new env steps over the old starts.
    """
    cfg = load_config(None, ["model.enabled=true", "model.hidden_sizes=[16,16]", "model.weight_decay=[0,0,0]",
                             "model.max_epochs=2", "model.rollouts_per_real=4", "model.train_freq=50"]).model
    env = envs.make("Pendulum-v1", 1, seed=0)
    mb = ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)
    real = make_replay_buffer(1000, "cpu", torch.Generator().manual_seed(0))
    g, obs = torch.Generator().manual_seed(1), env.reset()
    during: list[float] = []

    class Spy(UniformPolicy):  # reads the metrics from inside the rollouts, as a concurrent metrics row would
        def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            during.append(mb.metrics(0)["rollouts_per_real_realised"])
            return super().rollout_act(obs, noise)

    after = []
    for step in range(1, 151):
        action = envs.random_actions(env, g)
        nxt, reward, term, _, info = env.step(action)
        real.extend(transitions(obs, action, reward, info["final_obs"], term))
        obs = nxt
        if mb.after_collect(step - 1, step, real, Spy(-2.0, 2.0)):
            after.append(mb.metrics(step)["rollouts_per_real_realised"])
    assert after == [4.0, 4.0, 4.0]
    assert during and set(during) <= {0.0, 4.0} and during[-1] == 4.0  # 0 only before the first rollouts end

def test_policy_batches_mix_real_and_model_by_real_ratio() -> None:
    cfg = load_config(None, ["model.enabled=true", "model.real_ratio=0.25", "model.hidden_sizes=[8]",
                             "model.weight_decay=[0,0]"]).model
    env = envs.make("Pendulum-v1", 1)
    mb = ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)
    real = make_replay_buffer(100, "cpu", torch.Generator().manual_seed(0))
    real.extend(transitions(torch.zeros(50, 3), torch.zeros(50, 1), torch.zeros(50), torch.zeros(50, 3),
                            torch.zeros(50, dtype=torch.bool)))
    assert (mb.policy_batches(real, 64)[0]["obs"] == 0).all()  # no model data yet: all real
    model = transitions(torch.ones(50, 3), torch.ones(50, 1), torch.ones(50), torch.ones(50, 3),
                        torch.zeros(50, dtype=torch.bool))
    model[MODEL_VERSION] = torch.zeros(50, dtype=torch.int64)
    mb.model_buffer.add(model)
    (batch,) = mb.policy_batches(real, 64)
    assert batch.shape == (64,) and int((batch["obs"][:, 0] == 0).sum()) == 16


@pytest.mark.parametrize(("env_id", "steps"), [("Pendulum-v1", 205), ("CartPole-v1", 120)])
def test_stored_next_obs_is_the_true_final_observation_at_auto_reset(tmp_path: Path, env_id: str, steps: int) -> None:
    agent = "sac" if env_id == "Pendulum-v1" else "dqn"
    cfg = load_config(None, ["device=cpu", f"run_dir={tmp_path}", "progress=false", f"env.id={env_id}",
                             f"agent.name={agent}", "env.num_envs=2", f"total_env_steps={2 * steps}",
                             "agent.learning_starts=100000", "eval_every=100000", "checkpoint.every=100000"])
    trainer = SyncTrainer(cfg, tmp_path)
    trainer.run()
    data = trainer.buffer[: len(trainer.buffer)]
    task = trainer.env.task
    if env_id == "Pendulum-v1":  # recover the state from [cos, sin, thdot]
        state = torch.stack((torch.atan2(data["obs"][:, 1], data["obs"][:, 0]), data["obs"][:, 2]), -1)
    else:
        state = data["obs"]
    expected_next, _, expected_term = task.dynamics(state, data["action"])
    torch.testing.assert_close(data["next_obs"], task.observe(expected_next), rtol=1e-4, atol=1e-4)
    assert torch.equal(data["terminated"], expected_term)
    if env_id == "Pendulum-v1":  # 2 envs x 1 truncation at step 200, stored as not terminal
        boundary = torch.arange(len(data)) // 2 == 199
        assert not data["terminated"][boundary].any()
        assert not torch.allclose(data["next_obs"][boundary], data["obs"][boundary.roll(2)])
    else:
        assert data["terminated"].any()


def test_tiny_mbpo_run_measurably_improves_point_mass(tmp_path: Path) -> None:
    # 500 of the smoke run's 600 steps: it has steered to the origin by 400 (seeds 0 to 5 on a CPU)
    cfg = load_config(None, [*POINT_MASS_MBPO, "device=cpu", f"run_dir={tmp_path}", "total_env_steps=500"])
    trainer = SyncTrainer(cfg, tmp_path)
    trainer.run()
    rows = [r for r in read_metrics(tmp_path / "metrics.csv") if r["eval_return"]]
    first = float(rows[0]["eval_return"])
    last = sum(float(r["eval_return"]) for r in rows[-2:]) / 2
    # Holding still scores about -8 (E[x0^2] = 1/3 over 25 steps); steering to 0 scores about -0.5.
    assert last > -3.0 and last > first, (first, last)
    assert float(rows[-1]["model_buffer_size"]) > 0 and rows[-1]["model_elites"]
    assert trainer.model is not None and trainer.model.termination is None  # learned termination head in use


def test_unknown_next_observations_are_passed_to_the_fit_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    """An env that auto-resets without the true final obs marks those transitions; the ensemble gets
    every row (their reward and termination are real) with the mask, so no placeholder is a target.
    """
    from mbpo.data.transitions import NEXT_OBS_VALID, real_transitions

    cfg = load_config(None, ["model.enabled=true"]).model
    env = envs.make("Pendulum-v1", 4, device="cpu", seed=0)
    model = ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)
    obs = torch.randn(4, 3)
    info = {"final_obs": torch.full((4, 3), 7.0), "final_obs_valid": torch.tensor([True, False, True, True])}
    done = torch.tensor([False, True, True, False])
    data = real_transitions(obs, torch.zeros(4, 1), torch.zeros(4), torch.zeros(4, 3), torch.zeros(4, dtype=torch.bool),
                            done, info)
    assert data[NEXT_OBS_VALID].tolist() == [True, False, True, True]
    assert data["next_obs"][2].tolist() == [7.0, 7.0, 7.0]  # a known final obs is the target
    # An unknown one is replaced by obs: the learner's time-out bootstraps from V(s_t), never from the
    # env's placeholder (for an rsl_rl env, the next episode's first state).
    assert torch.equal(data["next_obs"][1], obs[1])
    fitted: dict[str, object] = {}

    def spy_fit(obs: torch.Tensor, *args: object, **kw: object) -> dict[str, object]:
        fitted.update(obs=obs, **kw)
        return {}

    monkeypatch.setattr(model.ensemble, "fit", spy_fit)
    model.train(data, env_steps=4)
    assert torch.equal(fitted["obs"], obs)
    assert fitted["next_obs_valid"].tolist() == [True, False, True, True]


def test_drawing_policy_batches_ahead_gives_the_same_batches_as_one_at_a_time() -> None:
    """The learner draws up to DRAW_ROWS transitions at once; on CPU that must not change any result."""
    cfg = load_config(None, ["model.enabled=true", "model.real_ratio=0.5", "model.hidden_sizes=[8]",
                             "model.weight_decay=[0,0]"]).model
    env = envs.make("Pendulum-v1", 1)
    g = torch.Generator().manual_seed(1)
    for with_model in (False, True):
        mb = ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)
        real = make_replay_buffer(100, "cpu", torch.Generator().manual_seed(0))
        real.extend(transitions(torch.randn(80, 3, generator=g), torch.randn(80, 1, generator=g),
                                torch.randn(80, generator=g), torch.randn(80, 3, generator=g),
                                torch.zeros(80, dtype=torch.bool)))
        if with_model:
            model = transitions(torch.randn(90, 3, generator=g), torch.randn(90, 1, generator=g),
                                torch.randn(90, generator=g), torch.randn(90, 3, generator=g),
                                torch.rand(90, generator=g) < 0.1)
            model[MODEL_VERSION] = torch.zeros(90, dtype=torch.int64)
            mb.model_buffer.add(model)
        states = real._rng.get_state(), mb.batch_generator.get_state()
        keys = ("obs", "action", "reward", "next_obs", "terminated")
        if with_model:  # the reference: 16 real then 16 model transitions per batch, one draw each
            one_at_a_time = [torch.cat((sample_real(real, 16).select(*keys),
                                        mb.model_buffer.sample(16, mb.batch_generator).select(*keys)))
                             for _ in range(5)]
        else:
            one_at_a_time = [sample_real(real, 32) for _ in range(5)]
        real._rng.set_state(states[0])
        mb.batch_generator.set_state(states[1])
        ahead = mb.policy_batches(real, 32, 5)
        assert len(ahead) == 5
        for a, b in zip(ahead, one_at_a_time, strict=True):
            assert a.shape == (32,)
            for key in keys:
                assert torch.equal(a[key], b[key]), (with_model, key)


def test_trainings_and_the_schedule_count_from_learning_starts_and_old_checkpoints_keep_their_own_count() -> None:
    """As the paper's code: the first model at learning_starts, epochs from there. A run checkpointed before
    that rule counted both from 0, and a resume must not make it wait for trainings it already had.
    """
    cfg = load_config(None, ["model.enabled=true", "model.hidden_sizes=[8]", "model.weight_decay=[0,0]",
                             "model.train_freq=250", "model.epoch_length=1000",
                             "model.rollout_schedule=[20,150,1,15]"]).model
    env = envs.make("Pendulum-v1", 1, seed=0)

    def make() -> ModelBased:
        return ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0,
                          learning_starts=5000)

    mb = make()
    assert (mb.budget_start, mb.clock_start, mb.epoch(30_000)) == (4750, 5000, 25.0)
    old = mb.state_dict()
    for key in ("budget_start", "clock_start"):
        del old["counters"][key]  # what a checkpoint written before the rule holds
    resumed = make()
    resumed.load_state_dict(old)
    assert (resumed.budget_start, resumed.clock_start, resumed.epoch(30_000)) == (0, 0, 30.0)
    again = make()
    again.load_state_dict(mb.state_dict())
    assert (again.budget_start, again.clock_start) == (4750, 5000)


@pytest.mark.parametrize("window", [0, 30])
def test_branches_start_from_the_newest_rows_of_the_start_window(window: int) -> None:
    """model.rollout_start_window=30: every branch starts from one of the 30 newest real rows, also once the
    ring has wrapped (rows 120-149 of 150 written to 100 slots sit at slots 20-49); 0 starts from all rows.
    """
    cfg = load_config(None, ["model.enabled=true", "model.hidden_sizes=[8]", "model.weight_decay=[0,0]",
                             "model.rollouts_per_real=4", "model.train_freq=50",
                             "model.max_epochs=1", f"model.rollout_start_window={window}"]).model
    env = envs.make("Pendulum-v1", 1)
    mb = ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)
    real = make_replay_buffer(100, "cpu", torch.Generator().manual_seed(0))
    rows = torch.arange(150, dtype=torch.float32)
    obs = torch.stack((rows, torch.zeros(150), torch.zeros(150)), 1)  # each row names itself in obs[:, 0]
    real.extend(transitions(obs, torch.zeros(150, 1), torch.zeros(150), obs, torch.zeros(150, dtype=torch.bool)))
    mb.train(real[: len(real)], 50)  # a fitted normaliser: the untrained ensemble's steps are finite
    mb.rollout(real[: len(real)], 50, UniformPolicy(-2.0, 2.0), mb.start_rows(real))
    started = mb.model_buffer.newest(len(mb.model_buffer))["obs"][:, 0]  # rollout length 1: each row a start
    assert started.numel() > 100  # of 4 x 50 branches (some leave the data's obs bounds and are not stored)
    if window:
        assert int(started.min()) >= 120 and len(set(started.tolist())) > 20  # the window, and most of it
    else:
        assert int(started.min()) < 100 and int(started.max()) >= 120  # old rows and new ones alike


@pytest.mark.parametrize("cut_short", [False, True])
def test_planners_get_the_ensemble_of_the_last_finished_fit_also_after_a_resume(cut_short: bool) -> None:
    """model.lookahead publishes the ensemble as of its last finished fit (ModelBased.acting); a checkpoint
    taken with a fit cut short by a stop holds that fit's half-trained weights, which no planner gets before the
    resume redoes the fit (as no rollout comes from them).
    """
    cfg = load_config(None, ["model.enabled=true", "model.lookahead.enabled=true", "model.hidden_sizes=[16,16]",
                             "model.weight_decay=[0,0,0]", "model.max_epochs=2"]).model
    env = envs.make("Pendulum-v1", 1, device="cpu", seed=0)
    model = ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)
    assert model.acting is not None and model.acting["version"] == 0
    data = transitions(torch.randn(64, 3), torch.rand(64, 1) * 4 - 2, torch.randn(64), torch.randn(64, 3),
                       torch.zeros(64, dtype=torch.bool))
    model.train(data, env_steps=64, should_stop=(lambda: True) if cut_short else None)
    assert model.fit_pending is cut_short
    assert model.acting["version"] == (0 if cut_short else 1)
    resumed = ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=1)
    resumed.load_state_dict(model.state_dict())
    assert resumed.acting is not None and resumed.acting["version"] == (0 if cut_short else 1)


def _named_rows(mb: ModelBased, n: int) -> TensorDict:
    """``n`` real rows whose obs[:, 0] names the row (0..n-1), the ensemble fitted on them."""
    rows = torch.arange(n, dtype=torch.float32)
    obs = torch.stack((rows, torch.zeros(n), torch.zeros(n)), 1)
    data = transitions(obs, torch.zeros(n, 1), torch.zeros(n), obs, torch.zeros(n, dtype=torch.bool))
    mb.train(data, n)
    return data


def _pendulum_model(*overrides: str) -> ModelBased:
    cfg = load_config(None, ["model.enabled=true", "model.hidden_sizes=[8]", "model.weight_decay=[0,0]",
                             "model.max_epochs=1", *overrides]).model
    env = envs.make("Pendulum-v1", 1)
    return ModelBased(cfg, "Pendulum-v1", env.observation_space, env.action_space, torch.device("cpu"), seed=0)


def test_a_fraction_of_a_branch_per_real_step_is_carried_to_the_next_rollouts() -> None:
    """0.5 branches per real step started none when each rollout covered one step (int(0.5) each time)."""
    mb = _pendulum_model("model.rollouts_per_real=0.5", "model.train_freq=1")
    data = _named_rows(mb, 50)
    for step in range(1, 11):
        mb.rollout(data, step, UniformPolicy(-2.0, 2.0))
    assert mb.rollouts_started == 5 and mb.metrics(10)["rollouts_per_real_realised"] == 0.5


def test_a_rollout_larger_than_the_model_buffer_starts_only_branches_it_holds_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    """4 branches of 3 steps per real step over 150 steps is 1,800 rows for a buffer of 4 x 50 x 3 = 600 (one
    fit covering more than model.epoch_length x retain_epochs env steps, as at thousands of envs): written step
    by step, the last step's rows overwrote the first steps', the ones nearest real states.
    """
    mb = _pendulum_model("model.rollouts_per_real=4", "model.train_freq=50", "model.epoch_length=50",
                         "model.retain_epochs=1", "model.rollout_schedule=[0,1,3,3]")
    data = _named_rows(mb, 150)
    mb.rollout(data, 150, UniformPolicy(-2.0, 2.0))
    assert mb.rollouts_started == 200 and mb.metrics(150)["model_rollouts_capped"] == 1
    held = mb.model_buffer.newest(len(mb.model_buffer))["obs"][:, 0]
    from_real_states = held == held.round()  # a first step starts from a real row's obs (an integer here)
    assert int(from_real_states.sum()) > 100
    assert "its rollouts started 200 branches, not 600, so that the buffer holds every step of them" in \
        capsys.readouterr().err


@pytest.mark.parametrize(("per_real", "steps", "epoch_length", "expected"), [
    (4.6, 100, 100, 460),  # a fit covering exactly what the buffer keeps is not capped (4.6 x 100 = 459.99...)
    (1000 / 3, 98_361, 100_000, 32_787_000),  # 1,000 a vector step of 3 envs (in floats 32,786,999.99...)
])
def test_the_branch_budget_is_exact_where_it_is_a_whole_number(
        per_real: float, steps: int, epoch_length: int, expected: int) -> None:
    mb = _pendulum_model(f"model.rollouts_per_real={per_real}", "model.train_freq=100",
                         f"model.epoch_length={epoch_length}", "model.retain_epochs=1")
    assert mb._branches_owed(steps) == (expected, None)


def test_rollouts_a_stop_ends_between_two_steps_are_owed_to_the_resume() -> None:
    """A stopping async run waited for the whole rollout (seconds a step at 100,000 branches), past its shutdown
    timeout, and then wrote no final checkpoint.
    """
    mb = _pendulum_model("model.rollouts_per_real=4", "model.train_freq=50", "model.rollout_schedule=[0,1,3,3]")
    data = _named_rows(mb, 50)
    asked: list[int] = []

    def stop_after_the_first_step() -> bool:
        asked.append(1)
        return len(asked) > 1

    mb.rollout(data, 50, UniformPolicy(-2.0, 2.0), should_stop=stop_after_the_first_step)
    assert len(asked) == 2 and 0 < len(mb.model_buffer) <= 200  # the first step's rows, of 4 x 50 branches
    assert mb.rollouts_owed and mb.rollouts_started == 0 and mb.last_rollout_env_steps == mb.budget_start
    mb.rollout(data, 50, UniformPolicy(-2.0, 2.0))  # the resume's
    assert not mb.rollouts_owed and mb.rollouts_started == 200


def test_a_capped_rollout_a_stop_cut_short_counts_once_with_its_resume() -> None:
    mb = _pendulum_model("model.rollouts_per_real=4", "model.train_freq=50", "model.epoch_length=25",
                         "model.retain_epochs=1", "model.rollout_schedule=[0,1,3,3]")
    data = _named_rows(mb, 50)
    mb.rollout(data, 50, UniformPolicy(-2.0, 2.0), should_stop=lambda: True)
    assert mb.rollouts_owed and mb.metrics(50)["model_rollouts_capped"] == 0
    mb.rollout(data, 50, UniformPolicy(-2.0, 2.0))
    assert mb.rollouts_started == 100 and mb.metrics(50)["model_rollouts_capped"] == 1
