"""The reference trainer: utd accounting, evaluation cadence, determinism and exact resume."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

import envs
from mbpo.config import Config, ConfigError, load_config
from mbpo.run.metrics import read_metrics
from mbpo.run.throughput import RATE_COLUMNS
from mbpo.trainers import AsyncTrainer, SyncTrainer
from mbpo.trainers.async_telemetry import AsyncTelemetry
from mbpo.trainers.base import INTERVAL_COLUMNS, TIME_PARTS
from tests.conftest import only_learner

pytestmark = pytest.mark.timeout(120)
TIMING = {"wall_s", "cpu_s", *RATE_COLUMNS, *(f"time_{part}_s" for part in TIME_PARTS)}


def tiny(run_dir: Path, *overrides: str) -> Config:
    return load_config(None, only_learner([
        "device=cpu", f"run_dir={run_dir}", "progress=false", "total_env_steps=400", "eval_every=200",
        "eval_episodes=2", "log_every=100", "env.num_envs=2", "agent.batch_size=32", "agent.learning_starts=100",
        "agent.buffer_size=1000", "agent.sac.hidden_sizes=[32,32]", "agent.dqn.hidden_sizes=[32,32]",
        "checkpoint.every=200", *overrides,
    ]))


def params(trainer: SyncTrainer) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}

    def walk(prefix: str, obj: object) -> None:
        if isinstance(obj, torch.Tensor):
            out[prefix] = obj
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}.{k}", v)

    walk("agent", trainer.agent.state_dict())
    return out


def untimed(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_utd_ratio_counts_updates_per_transition(tmp_path: Path) -> None:
    cfg = tiny(tmp_path, "env.num_envs=4", "agent.utd_ratio=0.5", "agent.learning_starts=200")
    trainer = SyncTrainer(cfg, tmp_path)
    row = trainer.run()
    assert trainer.agent.num_updates == (400 - 200 + 4) // 4 * 4 * 0.5  # from the step that reaches 200
    assert row["updates_per_vector_step"] == 2.0
    assert row["utd_ratio_realised"] == pytest.approx(0.5)


def test_learning_starts_and_eval_cadence(tmp_path: Path) -> None:
    trainer = SyncTrainer(tiny(tmp_path), tmp_path)
    trainer.run()
    rows = read_metrics(tmp_path / "metrics.csv")
    assert [r["env_steps"] for r in rows] == ["100", "200", "300", "400"]
    assert [bool(r["eval_return"]) for r in rows] == [False, True, False, True]
    assert rows[0]["updates"] == "2"  # updates begin with the vector step that reaches learning_starts
    assert {"env_steps", "updates", "wall_s", "train_return", "eval_return"} <= set(rows[0])
    assert [p.name for p in sorted((tmp_path / "checkpoints").iterdir())] == [
        "ckpt_000000000200.pt", "ckpt_000000000400.pt"]


@pytest.mark.parametrize("agent", ["sac", "dqn"])
def test_same_seed_same_metrics_and_parameters(tmp_path: Path, agent: str) -> None:
    env = "Pendulum-v1" if agent == "sac" else "CartPole-v1"
    a = SyncTrainer(tiny(tmp_path / "a", f"agent.name={agent}", f"env.id={env}"), tmp_path / "a")
    b = SyncTrainer(tiny(tmp_path / "b", f"agent.name={agent}", f"env.id={env}"), tmp_path / "b")
    a.run()
    b.run()
    assert untimed(read_metrics(tmp_path / "a/metrics.csv")) == untimed(read_metrics(tmp_path / "b/metrics.csv"))
    pa, pb = params(a), params(b)
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    c = SyncTrainer(tiny(tmp_path / "c", f"agent.name={agent}", f"env.id={env}", "seed=1"), tmp_path / "c")
    c.run()
    assert not all(torch.equal(pa[k], params(c)[k]) for k in pa)


VARIANTS = {
    "sac": ("agent.name=sac", "env.id=Pendulum-v1"),
    "dqn": ("agent.name=dqn", "env.id=CartPole-v1"),
    "mbpo": ("agent.name=sac", "env.id=PointMass-v0", "model.enabled=true", "model.hidden_sizes=[16,16]",
             "model.weight_decay=[0,0,0]", "model.max_epochs=5", "model.train_freq=100", "model.rollouts_per_real=2",
             "model.epoch_length=100", "model.rollout_schedule=[0,3,1,3]"),
}
VARIANTS["mbpo-crossq"] = (*VARIANTS["mbpo"], "agent.sac.crossq=true", "agent.sac.policy_delay=3",
                           "agent.sac.renorm_warmup=50", "agent.sac.precision=auto")
VARIANTS["sac-redq-droq"] = (*VARIANTS["sac"], "agent.sac.num_critics=4", "agent.sac.num_min=2",
                             "agent.sac.actor_q=mean", "agent.sac.dropout=0.05", "agent.sac.layer_norm=true",
                             "agent.sac.policy_delay=2")
"""The critic options (mbpo.agents.sac_loss), with and without the model, bf16 where the CPU has it."""
VARIANTS["sac-resets"] = (*VARIANTS["sac"], "agent.sac.reset_every=101")
"""Resets (agent.sac.reset_every): the half run of test_resume_is_exact stops at 202 updates, a multiple of 101,
with that reset still owed to the next update, so the resume must make it as the unbroken run does."""
VARIANTS["sac-nstep3"] = (*VARIANTS["sac"], "agent.n_step=3")
VARIANTS["mbpo-lookahead"] = (*VARIANTS["mbpo"], "model.lookahead.enabled=true", "model.lookahead.sequences=8",
                              "model.lookahead.iterations=2")
"""LOOP's planner (model.lookahead): its warm starts and its generator go on across the resume."""
VARIANTS["mbpo-nstep3"] = (*VARIANTS["mbpo"], "agent.n_step=3", "env.num_envs=5")
"""n-step returns (agent.n_step): the half run stops with windows of n - 1 steps pending in every env, which the
resume must go on from, not drop: both stop mid-episode (Pendulum's 200 steps at 150 vector steps, PointMass's 25
at 60)."""


def tensors(state: object, prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    if isinstance(state, torch.Tensor):
        out[prefix] = state
    elif isinstance(state, dict):
        for k, v in state.items():
            out.update(tensors(v, f"{prefix}.{k}"))
    elif hasattr(state, "to_dict"):  # TensorDict
        out.update(tensors(state.to_dict(), prefix))
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_resume_is_exact(tmp_path: Path, variant: str) -> None:
    common = VARIANTS[variant]
    full = SyncTrainer(tiny(tmp_path / "full", *common, "total_env_steps=600"), tmp_path / "full")
    full.run()
    half = SyncTrainer(tiny(tmp_path / "half", *common, "total_env_steps=300", "checkpoint.every=300"),
                       tmp_path / "half")
    half.run()
    with pytest.raises(ConfigError, match="'env.num_envs' cannot change when resuming"):
        SyncTrainer.resume(tmp_path / "half", ["total_env_steps=600", "env.num_envs=3"])
    resumed = SyncTrainer.resume(tmp_path / "half", ["total_env_steps=600"])
    assert resumed.env_steps == 300
    resumed.run()
    a, b = tensors(full.state_dict()), tensors(resumed.state_dict())
    assert a.keys() <= b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    if variant == "mbpo":
        assert any(k.startswith(".model.ensemble") for k in a) and any(k.startswith(".model.model_buffer") for k in a)
    assert untimed(read_metrics(tmp_path / "full/metrics.csv")) == untimed(read_metrics(tmp_path / "half/metrics.csv"))
    if variant == "sac-resets":  # resets before updates 102, 203, 304, 405; the one owed at 202 by the resume
        assert (half.agent._calls, half.agent.num_resets) == (202, 1)  # type: ignore[attr-defined]
        assert resumed.agent.num_resets == full.agent.num_resets == 4  # type: ignore[attr-defined]
        assert [r["resets"] for r in read_metrics(tmp_path / "full/metrics.csv")] == ["0", "1", "1", "2", "3", "4"]


def test_a_resume_that_starts_new_episodes_keeps_the_cut_episodes_last_steps(tmp_path: Path) -> None:
    """With n-step returns and an env that cannot save its simulator, the resume starts new episodes: the steps
    whose windows the stop left open are stored as time-outs at the last step, so every collected step is in the
    buffer once (an n-step row per 1-step transition), none lost.
    """
    factory = ("env.factory=examples.point_reach:make_env", "env.id=PointReach", "env.kwargs.max_episode_steps=40",
               "agent.name=sac", "agent.n_step=3")
    half = SyncTrainer(tiny(tmp_path / "half", *factory, "total_env_steps=300", "checkpoint.every=300"),
                       tmp_path / "half")
    half.run()
    assert len(half.buffer) < 300  # the stop (150 vector steps) is mid-episode: windows were pending
    with pytest.warns(UserWarning, match="PointReach cannot save its simulator state"):
        resumed = SyncTrainer.resume(tmp_path / "half", ["total_env_steps=600"])
    assert len(resumed.buffer) == 300


@pytest.mark.reliability
@pytest.mark.parametrize("variant, signum, code", [("sac", signal.SIGINT, 130), ("sac", signal.SIGTERM, 143),
                                                   ("mbpo", signal.SIGTERM, 143)],
                         ids=["sac-SIGINT", "sac-SIGTERM", "mbpo-SIGTERM"])
def test_a_signal_stops_the_run_with_a_final_checkpoint_and_a_resume_ends_where_an_unbroken_run_does(
    tmp_path: Path, variant: str, signum: int, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C or SIGTERM between two checkpoints: the run stops after the vector step in progress, logs and
    checkpoints there (nothing trained is lost), exits 128 + signum, and a resume goes on bit-exactly.
    """
    common = VARIANTS[variant]
    full = SyncTrainer(tiny(tmp_path / "full", *common), tmp_path / "full")
    full.run()
    cut = SyncTrainer(tiny(tmp_path / "cut", *common), tmp_path / "cut")
    step = cut.env.step

    def signalling_step(actions: torch.Tensor) -> envs.base.StepResult:
        if cut.env_steps == 250:
            os.kill(os.getpid(), signum)  # the main thread's handler runs before the step goes on
        return step(actions)

    def unhandled(signum: int, frame: object) -> None:  # instead of the default, which would end pytest itself
        raise AssertionError(f"{signal.Signals(signum).name} reached the handler outside the run")

    cut.env.step = signalling_step  # type: ignore[method-assign]  # a fault injected into this env only
    previous = signal.signal(signum, unhandled)
    try:
        cut.run()
        assert signal.getsignal(signum) is unhandled  # the run's handler is gone again
    finally:
        signal.signal(signum, previous)
    assert cut.exit_code == code and cut.env_steps == 252
    assert sorted(p.name for p in (tmp_path / "cut/checkpoints").iterdir())[-1] == "ckpt_000000000252.pt"
    assert (f"[mbpo] stopped at 252 env steps; final checkpoint: {tmp_path / 'cut/checkpoints/ckpt_000000000252.pt'}; "
            f"`python -m mbpo resume {tmp_path / 'cut'}` goes on from it") in capsys.readouterr().err
    rows = read_metrics(tmp_path / "cut/metrics.csv")
    assert [r["env_steps"] for r in rows] == ["100", "200", "252"]
    resumed = SyncTrainer.resume(tmp_path / "cut", [])
    assert resumed.env_steps == 252
    resumed.run()
    assert resumed.exit_code == 0 and resumed.env_steps == 400
    a, b = tensors(full.state_dict()), tensors(resumed.state_dict())
    assert [k for k in a if not torch.equal(a[k], b[k])] == []


def run_with_sigterm_in_the_fit_at(trainer: SyncTrainer, env_steps: int) -> dict[str, int]:
    """Run ``trainer`` with a SIGTERM at the first gradient step of its model fit at ``env_steps``; returns the
    model's trainings and rollouts just before that fit.
    """
    model = trainer.model
    assert model is not None
    train_step, before = model.ensemble.train_step, {}

    def signalling_train_step(*args: torch.Tensor) -> torch.Tensor:
        if trainer.env_steps == env_steps and not before:
            before.update(trainings=model.trainings, rollouts=model.rollouts_started)
            os.kill(os.getpid(), signal.SIGTERM)  # handled before this gradient step runs; the fit stops after it
        return train_step(*args)

    model.ensemble.train_step = signalling_train_step  # type: ignore[method-assign]  # a fault in this fit only
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        trainer.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return before


@pytest.mark.reliability
def test_a_fit_cut_short_by_a_signal_makes_no_rollouts_and_is_redone_on_resume(tmp_path: Path) -> None:
    """SIGTERM during the model fit at 300 env steps: the half-fitted ensemble feeds no rollouts, and the resume
    fits again before rolling out, so the run ends with the unbroken run's trainings and rollouts.
    """
    full = SyncTrainer(tiny(tmp_path / "full", *VARIANTS["mbpo"]), tmp_path / "full")
    full.run()
    cut = SyncTrainer(tiny(tmp_path / "cut", *VARIANTS["mbpo"]), tmp_path / "cut")
    model = cut.model
    assert model is not None
    before = run_with_sigterm_in_the_fit_at(cut, 300)
    assert cut.exit_code == 143 and cut.env_steps == 300 and model.last_fit["stopped_by"] == "stop"
    assert (model.trainings, model.rollouts_started) == (before["trainings"], before["rollouts"])
    resumed = SyncTrainer.resume(tmp_path / "cut", [])
    assert resumed.model is not None
    fits: list[int] = []
    measured: list[int] = []
    fit, measure = resumed.model.ensemble.fit, resumed.model.measure_health
    resumed.model.ensemble.fit = lambda *a, **k: fits.append(resumed.env_steps) or fit(*a, **k)  # type: ignore[method-assign]
    resumed.model.measure_health = lambda *a: measured.append(resumed.env_steps) or measure(*a)  # type: ignore[method-assign]
    resumed.run()
    assert fits == [300, 400]  # the cut fit again before the first step, then the 400 one
    assert measured == [400]  # the cut fit trained on the new rows: its health was measured before it, not again
    assert resumed.model.trainings == full.model.trainings  # type: ignore[union-attr]
    assert resumed.model.rollouts_started == full.model.rollouts_started  # type: ignore[union-attr]


@pytest.mark.reliability
def test_a_fit_cut_short_where_every_step_trains_is_not_merged_into_the_next(tmp_path: Path) -> None:
    """With ``num_envs >= train_freq`` every vector step trains: a resume that redid the cut fit inside the
    next step's training would make one fit of two, and the run would end one training short.
    """
    wide = (*VARIANTS["mbpo"], "env.num_envs=16", "model.train_freq=16")
    full = SyncTrainer(tiny(tmp_path / "full", *wide), tmp_path / "full")
    full.run()
    cut = SyncTrainer(tiny(tmp_path / "cut", *wide), tmp_path / "cut")
    run_with_sigterm_in_the_fit_at(cut, 208)
    assert cut.exit_code == 143 and cut.env_steps == 208 and cut.model is not None and cut.model.fit_pending
    resumed = SyncTrainer.resume(tmp_path / "cut", [])
    resumed.run()
    assert resumed.model is not None and full.model is not None
    assert resumed.model.trainings == full.model.trainings

@pytest.mark.reliability
@pytest.mark.parametrize("resumed_by", ["sync", "async"])
def test_a_last_fit_cut_short_is_redone_by_the_resume_not_called_done(tmp_path: Path, resumed_by: str) -> None:
    """SIGTERM during the fit of the last vector step: the run's env steps are all taken, but its model is
    half-fitted; the resume (by the trainer the run's config names) fits again (a finished run holds a whole
    model) and fills the last step's row, and only then is the run done.
    """
    from mbpo.trainers import RunAlreadyDone, resume_trainer

    full = SyncTrainer(tiny(tmp_path / "full", *VARIANTS["mbpo"]), tmp_path / "full")
    full.run()
    cut = SyncTrainer(tiny(tmp_path / "cut", *VARIANTS["mbpo"], f"trainer={resumed_by}"), tmp_path / "cut")
    model = cut.model
    assert model is not None
    run_with_sigterm_in_the_fit_at(cut, 400)
    assert cut.exit_code == 143 and cut.env_steps == 400 and model.fit_pending
    cut_last = read_metrics(tmp_path / "cut/metrics.csv")[-1]
    resumed = resume_trainer(tmp_path / "cut")
    assert resumed.model is not None
    fits: list[int] = []
    fit = resumed.model.ensemble.fit
    resumed.model.ensemble.fit = lambda *a, **k: fits.append(resumed.env_steps) or fit(*a, **k)  # type: ignore[method-assign]
    resumed.run()
    assert fits == [400] and not resumed.model.fit_pending
    assert resumed.model.trainings == full.model.trainings  # type: ignore[union-attr]
    assert resumed.agent.num_updates == full.agent.num_updates  # the updates were all done before the stop
    rows, full_rows = (read_metrics(d / "metrics.csv") for d in (tmp_path / "cut", tmp_path / "full"))
    assert [r["env_steps"] for r in rows] == [r["env_steps"] for r in full_rows]  # one row for the last step,
    assert rows[-1]["eval_return"] and rows[-1]["model_trainings"] == full_rows[-1]["model_trainings"]  # whole
    interval = INTERVAL_COLUMNS | AsyncTelemetry.COLUMNS  # the step's own rates and time shares, not the resume's
    assert {k: v for k, v in rows[-1].items() if k in interval} == {k: v for k, v in cut_last.items() if k in interval}
    with pytest.raises(RunAlreadyDone):
        resume_trainer(tmp_path / "cut")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_training_leaves_every_weight_outside_autograd(tmp_path: Path, variant: str) -> None:
    """An in-place weight update that autograd records (e.g. a target-net step from weights that require grad)
    chains one graph node per update onto the weight: memory that grows for the whole run.
    """
    trainer = SyncTrainer(tiny(tmp_path, *VARIANTS[variant]), tmp_path)
    trainer.run()
    modules = dict(trainer.agent.networks)
    if trainer.model is not None:
        modules["dynamics ensemble"] = trainer.model.ensemble
    recorded = [f"{name}: {key}" for name, module in modules.items()
                for key, t in (*module.named_parameters(), *module.named_buffers()) if t.grad_fn is not None]
    assert trainer.agent.num_updates > 0 and recorded == []


def test_rng_streams_get_independent_seeds(tmp_path: Path) -> None:
    from mbpo.config.seeding import derive

    streams = [derive(0, "env"), derive(0, "actions"), derive(0, "collector_env", 0, 0),
               derive(0, "collector_env", 1, 0), derive(0, "collector_env", 0, 1), derive(0, "eval", 200)]
    assert len(set(streams)) == len(streams) and derive(0, "env") == streams[0] != derive(1, "env")
    assert all(0 <= s < 2**31 for s in streams)
    trainer = SyncTrainer(tiny(tmp_path, "env.num_envs=4"), tmp_path)
    trainer.env.reset()
    first_states = trainer.env.state[:, 0] / torch.pi
    first_actions = envs.random_actions(trainer.env, trainer._action_generator)[:, 0] / 2.0
    assert not torch.allclose(first_states, first_actions)  # same draws would make these equal


def test_checkpoint_size_grows_with_the_transitions_held_not_the_capacity(tmp_path: Path) -> None:
    sizes = []
    for steps in (100, 200):
        run = tmp_path / str(steps)
        SyncTrainer(tiny(run, "agent.buffer_size=1000000", f"total_env_steps={steps}", "agent.learning_starts=400"),
                    run).run()
        sizes.append((run / f"checkpoints/ckpt_{steps:012d}.pt").stat().st_size)
    per_transition = (sizes[1] - sizes[0]) / 100
    assert 0 < per_transition < 100  # obs, action, reward, next_obs, flags of one Pendulum step: ~45 bytes
    assert sizes[0] < 200_000  # the preallocated 1M-transition storage alone is ~40 MB


def test_the_trainers_draws_ignore_the_process_global_rngs(tmp_path: Path) -> None:
    """Replay sampling, learner noise, model training and rollouts each have their own generator: reseeding
    the globals in between (mjlab's env construction does) changes no parameter of a run.
    """
    import random

    import numpy as np

    def run(name: str, reseed: bool) -> dict[str, torch.Tensor]:
        trainer = SyncTrainer(tiny(tmp_path / name, *VARIANTS["mbpo"]), tmp_path / name)
        update = trainer.agent.update

        def update_after_reseeding(batch: object) -> object:
            random.seed(trainer.agent.num_updates)
            np.random.seed(trainer.agent.num_updates)
            torch.manual_seed(trainer.agent.num_updates)
            return update(batch)

        if reseed:  # as if an mjlab env were built now (mjlab.utils.random.seed_rng seeds exactly these)
            random.seed(7)
            np.random.seed(7)
            torch.manual_seed(7)
            trainer.agent.update = update_after_reseeding
        trainer.run()
        return tensors(trainer.state_dict())

    plain, reseeded = run("plain", False), run("reseeded", True)
    assert plain.keys() == reseeded.keys()
    assert [k for k in plain if not torch.equal(plain[k], reseeded[k])] == []


def test_drawing_batches_ahead_changes_no_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Policy batches drawn DRAW_ROWS at a time (here 2 or 1 batches per draw, 5 updates per vector step) give
    the update count and the parameters of drawing one batch per update.
    """
    import mbpo.trainers.base as base

    results = []
    for rows in (64, 32):  # batch_size 32: 2 batches per draw (chunks 2, 2, 1), then 1
        monkeypatch.setattr(base, "DRAW_ROWS", rows)
        trainer = SyncTrainer(tiny(tmp_path / str(rows), "agent.utd_ratio=2.5", "model.enabled=true",
                                   "model.train_freq=100", "model.hidden_sizes=[16]", "model.weight_decay=[0,0]",
                                   "model.max_epochs=2"),
                              tmp_path / str(rows))
        trainer.run()
        assert trainer.agent.num_updates == (400 - 100 + 2) // 2 * 5  # from the step that reaches 100
        assert len(trainer.model.model_buffer) > 0  # half the batches came from the model buffer
        results.append(params(trainer))
    assert results[0].keys() == results[1].keys()
    for key in results[0]:
        assert torch.equal(results[0][key], results[1][key]), key


def test_n_step_transitions_reach_the_buffer_and_the_update(tmp_path: Path) -> None:
    from mbpo.data.transitions import DISCOUNT

    gamma = 0.99
    trainer = SyncTrainer(tiny(tmp_path, "agent.n_step=3", "env.num_envs=4"), tmp_path)
    trainer.run()
    data = trainer.buffer[: len(trainer.buffer)]
    windows = {min((1, 2, 3), key=lambda m: abs(d - gamma ** m)) for d in torch.unique(data[DISCOUNT]).tolist()}
    steps = torch.round(torch.log(data[DISCOUNT]) / torch.log(torch.tensor(gamma)))
    assert torch.allclose(data[DISCOUNT], gamma**steps)  # every row's discount is gamma to a whole power
    assert 3 in windows and windows <= {1, 2, 3}  # Pendulum only times out: shorter windows end an episode
    assert 400 - 4 * 2 <= len(trainer.buffer) <= 400  # up to n - 1 steps per env still pending
    assert trainer.agent.num_updates > 0 and trainer.agent.num_skipped_updates == 0


def test_updates_per_vector_step_is_the_same_budget_as_utd_ratio(tmp_path: Path) -> None:
    a = SyncTrainer(tiny(tmp_path / "a", "env.num_envs=4", "agent.updates_per_vector_step=2"), tmp_path / "a")
    b = SyncTrainer(tiny(tmp_path / "b", "env.num_envs=4", "agent.utd_ratio=0.5"), tmp_path / "b")
    a.run()
    b.run()
    assert a.agent.num_updates == b.agent.num_updates == (400 - 100 + 4) // 4 * 2
    pa, pb = params(a), params(b)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_rollouts_per_vector_step_sets_the_model_budget_per_vector_step(tmp_path: Path) -> None:
    mbpo = [v for v in VARIANTS["mbpo"] if not v.startswith("model.rollouts_per_real")]
    trainer = SyncTrainer(tiny(tmp_path, *mbpo, "env.num_envs=4", "model.rollouts_per_vector_step=8"), tmp_path)
    row = trainer.run()
    assert row["rollouts_per_real"] == 2.0 and row["rollouts_per_real_realised"] == pytest.approx(2.0)
    with pytest.raises(ConfigError, match="set one of the two"):
        tiny(tmp_path, *mbpo, "model.rollouts_per_real=2", "model.rollouts_per_vector_step=8")


@pytest.mark.parametrize("trainer", ["sync", "async"])
def test_a_run_as_long_as_its_learning_starts_trains_and_is_not_told_it_trains_nothing(
        tmp_path: Path, trainer: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The vector step that reaches ``learning_starts`` earns updates; a warning said such a run trained nothing
    (the scale configs' first batch: learning_starts is one collection batch).
    """
    cfg = tiny(tmp_path, "total_env_steps=100", f"trainer={trainer}", "agent.batch_size=16", "eval_every=100")
    run = SyncTrainer(cfg, tmp_path) if trainer == "sync" else AsyncTrainer(cfg, tmp_path)
    row = run.run()
    assert cfg.agent.learning_starts == 100 and row["updates"] > 0
    assert "trains nothing" not in capsys.readouterr().err


def test_a_model_fit_on_a_full_replay_buffer_is_counted_before_the_run_starts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A fit copies every real row and makes its own tensors of them (several times the buffer's bytes): a run
    accepted on the buffers alone ran out of memory at a late fit. Its peak is said, and counted.
    """
    import gymnasium as gym
    import numpy as np

    from mbpo.config import load_config
    from mbpo.errors import MbpoError
    from mbpo.trainers.memory_check import check_memory, fit_bytes_per_row

    box = gym.spaces.Box(-2, 2, (1,), np.float32)
    check_memory(load_config("configs/pendulum_mbpo.yaml"), 3, 1, box, torch.device("cpu"))
    per_row = 34 + fit_bytes_per_row(3, 1, 7)  # Pendulum's real row and the fit's own tensors of it
    assert f"a model fit on up to 2,000 real rows x {per_row} B" in capsys.readouterr().err  # total_env_steps
    big = ["agent.buffer_size=100000000", "total_env_steps=100000000", "model.rollouts_per_real=1"]
    available = 34 * 10**8 * 3  # the replay buffer fits three times over; its fit does not
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(envs, "available_memory", lambda device: available)
        with pytest.raises(MbpoError, match=r"a model fit on up to 100,000,000 real rows .*lower agent.buffer_size"):
            check_memory(load_config("configs/pendulum_mbpo.yaml", big), 3, 1, box, torch.device("cpu"))


def test_a_run_that_cannot_train_says_so_and_buffers_that_cannot_fit_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mbpo.errors import MbpoError

    SyncTrainer(tiny(tmp_path / "a", "total_env_steps=99"), tmp_path / "a")
    err = capsys.readouterr().err
    assert "total_env_steps=99 is below agent.learning_starts=100: this run takes random actions only" in err
    assert "[mbpo] memory on cpu: replay buffer 1,000 x 34 B" in err  # Pendulum: 2 x 12 + 4 + 4 + 2 bytes a row
    with pytest.raises(MbpoError, match=r"buffers need .* GiB on cpu but only .* available.*lower agent.buffer_size"):
        SyncTrainer(tiny(tmp_path / "b", "agent.buffer_size=100000000000"), tmp_path / "b")


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_resolved_once_printed_and_stored_in_the_runs_config(
    tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("mbpo.device.precision.native_bf16", lambda device: (native, "CPU flags as the test says"))
    cfg = tiny(tmp_path, "total_env_steps=100", "agent.sac.precision=auto", "model.enabled=true",
               "model.precision=auto", "model.hidden_sizes=[16,16]", "model.weight_decay=[0,0,0]")
    trainer = SyncTrainer(cfg, tmp_path)
    want = "bf16" if native else "fp32"
    assert trainer.agent.precision == want and trainer.model is not None and trainer.model.ensemble.precision == want
    trainer.run()
    stored = load_config(tmp_path / "config.yaml")
    assert (stored.agent.sac.precision, stored.model.precision) == (want, want)
    err = capsys.readouterr().err
    assert f"agent.sac.precision={want} on cpu (auto: CPU flags as the test says)" in err
    assert f"model.precision={want} on cpu (auto: CPU flags as the test says)" in err


def test_each_evaluation_logs_the_spread_of_its_episodes(tmp_path: Path) -> None:
    SyncTrainer(tiny(tmp_path, "eval_episodes=3"), tmp_path).run()
    evaluated = [r for r in read_metrics(tmp_path / "metrics.csv") if r["eval_return"]]
    assert len(evaluated) == 2
    for r in evaluated:
        low, mean, high = float(r["eval_return_min"]), float(r["eval_return"]), float(r["eval_return_max"])
        assert low <= mean <= high and low < high  # three Pendulum starts never score alike
        assert float(r["eval_return_std"]) > 0 and float(r["eval_length_mean"]) == 200  # Pendulum's time limit


def test_run_json_records_what_produced_the_run_at_the_start_and_at_every_resume(tmp_path: Path) -> None:
    import json
    import re

    from mbpo.run.provenance import CPU_FLAGS

    SyncTrainer(tiny(tmp_path, "total_env_steps=200"), tmp_path).run()
    SyncTrainer.resume(tmp_path, ["total_env_steps=400"]).run()
    records = json.loads((tmp_path / "run.json").read_text())["provenance"]
    assert [r["at_env_steps"] for r in records] == [0, 200]
    for r in records:
        assert re.fullmatch(r"[0-9a-f]{40}", r["code"]["commit"]) and isinstance(r["code"]["dirty"], bool)
        assert r["packages"]["torch"] == torch.__version__ and r["packages"]["gymnasium"]
        assert set(r["machine"]["cpu_flags"]) <= set(CPU_FLAGS) and r["machine"]["cpu_count"] >= 1
