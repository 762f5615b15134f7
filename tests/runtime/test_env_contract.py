"""A run's env held to the VecEnv contract at start-up, the same on every trainer and backend.

A field that does not fit is one line, ``error: ...``, and exit 2 before any collector starts; a float64
obs is converted to float32, one ``[mbpo]`` line says so, and the run trains. The env is
tests/envs/factories.py's ``BreaksContract`` (Pendulum-v1 with one field broken), named by ``env.factory``
as a user's would be (collector processes and Ray actors import it by that name).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

import envs
from mbpo import cli
from mbpo.agents import make_agent
from mbpo.config import load_config
from mbpo.runtime.collectors import EnvStepper
from mbpo.runtime.env_builder import EnvContractError, check_training_env
from mbpo.runtime.supervisor import CollectorPool
from mbpo.trainers import AsyncTrainer
from tests.conftest import TRAINER_RUNS
from tests.envs.factories import breaks_contract

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(120)]

FACTORY = ["env.id=Mine", "env.factory=tests.envs.factories:breaks_contract"]
TINY = ["device=cpu", "progress=false", "total_env_steps=64", "agent.learning_starts=32", "eval_every=64",
        "eval_episodes=2", "log_every=64", "env.num_envs=2", "agent.batch_size=16", "agent.sac.hidden_sizes=[16,16]",
        "model.enabled=false", "runtime.num_collectors=1", "runtime.collection_batch_size=16", "checkpoint.every=64"]
# Ray has its own case below (test_on_ray_too_...)
RUNS = {name: overrides for name, overrides in TRAINER_RUNS.items() if name != "ray"}
WHO = "env.factory='tests.envs.factories:breaks_contract'"
CONTRACT = "(the VecEnv contract, envs/base.py)"
ERRORS = {
    "int64_obs": "reset returned obs as int64; expected float32 of shape (num_envs, obs_dim) = (2, 3) on cpu "
                 f"{CONTRACT}: return obs.float(); a discrete observation (an index) learns better one-hot encoded",
    "obs_shape": "reset returned obs of shape (2, 2); expected float32 of shape (num_envs, obs_dim) = (2, 3) on cpu "
                 f"{CONTRACT}: return one row per env, flattened to obs_dim=3 values (from observation_space.shape="
                 "(3,); fix observation_space if the rows are right)",
    "float_terminated": "step returned terminated as float32; expected bool of shape (num_envs,) = (2,) on cpu "
                        f"{CONTRACT}: return a bool tensor: the comparison that decides it, or terminated > 0.5 for "
                        "0/1 values",
    "reward_column": "step returned reward of shape (2, 1); expected float32 of shape (num_envs,) = (2,) on cpu "
                     f"{CONTRACT}: return reward.squeeze(-1) (one value per env, no trailing dimension)",
    "no_final_obs": "step returned info without 'final_obs' (keys: []); expected info['final_obs'] on every step: "
                    "float32 of shape (num_envs, obs_dim) = (2, 3) on cpu, each finished env's last observation "
                    f"before its same-step auto-reset {CONTRACT}: add it (rows of envs that did not finish are not "
                    "read: obs itself will do for them)",
    "nan_first_obs": "reset returned obs with a non-finite value in env index 0 ([nan, nan, nan]); expected finite "
                     f"observations: no policy can act on a NaN or inf {CONTRACT}: fix the env's reset "
                     "(runtime.nonfinite covers the steps after it, not the first observation)",
    "reset_without_keywords": "env.reset without the keywords seed and env_ids (its signature: reset()); expected "
                              f"reset(seed=None, env_ids=None) {CONTRACT}: add both: seed re-seeds every env; "
                              "env_ids resets only those envs (the trainer resets an env left in a non-finite state "
                              "with it)",
    "no_observation_space": f"env.observation_space missing; expected a gymnasium.spaces.Box of ONE env {CONTRACT}: "
                            "set env.observation_space in the env's __init__",
    "discrete_observation_space": "env.observation_space = Discrete(3); expected a gymnasium.spaces.Box of ONE env "
                                  f"{CONTRACT}: set env.observation_space in the env's __init__ (a discrete "
                                  "observation: one-hot encode it into a Box)",
    "device_gpu": "env.device = 'gpu', which is no torch device; expected a torch.device or its name ('cpu', 'cuda', "
                  f"'cuda:N'): where the env's tensors live {CONTRACT}: set env.device = torch.device(...) in the "
                  "env's __init__",
}
CONVERTED = (f"[mbpo] {WHO}: the env returns obs as float64, info['final_obs'] as float64; converting to float32 at "
             "every reset and step (what the learner computes in; return float32 to save the copy)")


@pytest.fixture
def no_collector_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting the collectors, or the fork server they are forked from, fails the test: the check must come first
    (a server started for a run that then fails waits out its imports, about 3 s, before it can be stopped).
    """
    from mbpo.runtime.backends import forkserver

    def start(pool: CollectorPool) -> None:
        raise AssertionError("a collector started before the env was checked")

    def start_server() -> None:
        raise AssertionError("the fork server started before the env was checked")

    monkeypatch.setattr(CollectorPool, "start", start)
    monkeypatch.setattr(forkserver, "start_server", start_server)


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize("run", list(RUNS))
@pytest.mark.parametrize("breaks", list(ERRORS))
def test_a_field_that_breaks_the_contract_is_one_line_and_exit_2_before_any_collector_starts(
        breaks: str, run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_collector_starts: None) -> None:
    code = cli.main(["train", *FACTORY, f"env.kwargs.breaks={breaks}", *TINY, *RUNS[run], f"run_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert (code, error_lines(err)) == (2, [f"error: {WHO}: {ERRORS[breaks]}"]), err[-3000:]


SQUASH_ERRORS = {
    "unbounded_actions": "SAC squashes actions into the Box bounds, which must be finite and at most float32's largest "
                         "value apart; got low=[-inf], high=[inf] (wrap the env to rescale actions to finite bounds)",
    "huge_actions": "SAC squashes actions into the Box bounds, which must be finite and at most float32's largest "
                    "value apart; got low=[-3.4028235e+38], high=[3.4028235e+38] (wrap the env to rescale actions to "
                    "finite bounds)",
    "integer_actions": "SAC acts in a continuous Box, got one of int64 (Box(-2, 2, (1,), int64)), in which the env "
                       "would round every action it is given while the learner trains on the unrounded one; use "
                       "a float Box, or a Discrete action space with agent.name=dqn",
    "fixed_actions": "SAC squashes actions into the Box bounds, which must have high > low in every dimension; "
                     "dimension 0 does not (low=[0.5], high=[0.5]: a fixed action, whose zero width every update "
                     "would divide by); drop it from the env's action space, or set it in a wrapper"}


@pytest.mark.parametrize("run", list(TRAINER_RUNS))
@pytest.mark.parametrize("breaks", list(SQUASH_ERRORS))
def test_actions_the_learner_cannot_squash_are_one_line_and_exit_2_before_any_collector_starts(
        run: str, breaks: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_collector_starts: None) -> None:
    """The contract holds any Box space; SAC needs finite action bounds and real-valued actions: the learner's
    refusal is the user's to fix (a wrapper that rescales the actions), so it is one line, not a traceback, on every
    trainer and backend (it comes before any backend starts, Ray's included). An integer Box trained silently: the
    env got 1 for 1.9, the replay buffer kept 1.9.
    """
    code = cli.main(["train", *FACTORY, f"env.kwargs.breaks={breaks}", *TINY, *TRAINER_RUNS[run],
                     f"run_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert (code, error_lines(err)) == (2, [f"error: {SQUASH_ERRORS[breaks]}"]), err[-3000:]


def test_a_field_that_breaks_only_at_the_training_envs_size_is_one_line_and_no_collector_restarts(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The start-up probe steps the evaluation env (eval_episodes=2 envs here), which fits; the training env
    (env.num_envs=1) squeezes its reward to a scalar. Its first step is held to the contract as it comes, so the
    run ends on one line naming the field (and the collector), not on the learner's traceback after a
    collector's restarts: a restart would step the same env into it again.
    """
    code = cli.main(["train", *FACTORY, "env.kwargs.breaks=squeezed_reward", *TINY, *TRAINER_RUNS[trainer_run],
                     "env.num_envs=1", f"run_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    who = WHO if trainer_run == "sync" else f"collector 0: {WHO}"
    assert (code, error_lines(err)) == (2, [f"error: {who}: step returned reward of shape (); expected float32 of "
                                            f"shape (num_envs,) = (1,) on cpu {CONTRACT}: return one value per env "
                                            "(num_envs=1)"]), err[-3000:]
    assert "restarting" not in err, err[-3000:]


def test_a_step_that_breaks_the_contract_later_is_one_line_naming_the_field_and_no_collector_restarts(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The start-up probe and the first step fit; the env's 5th step returns a float terminated. Where processing
    that step fails, the step is held to the contract: one line naming the field, not torch's message from deep
    in the learner's code after a collector's restarts.
    """
    code = cli.main(["train", *FACTORY, "env.kwargs.breaks=float_terminated", "env.kwargs.from_step=4", *TINY,
                     *TRAINER_RUNS[trainer_run], f"run_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    who = WHO if trainer_run == "sync" else f"collector 0: {WHO}"
    assert (code, error_lines(err)) == (2, [f"error: {who}: {ERRORS['float_terminated']}"]), err[-3000:]
    assert "restarting" not in err, err[-3000:]


def test_a_partial_reset_that_returns_only_the_reset_rows_is_named() -> None:
    """reset(env_ids=...) returns every env's observations (the contract); one that returns only the reset rows
    is named where a non-finite observation is reset, not by the policy's shape error a step later.
    """
    from mbpo.runtime.nonfinite import reset_poisoned

    env = envs.make("Pendulum-v1", 4, device="cpu", seed=0)
    obs = env.reset(seed=0)
    reset = env.reset
    env.reset = lambda seed=None, env_ids=None: reset(seed=seed, env_ids=env_ids)[env_ids]  # type: ignore[method-assign]
    obs[1] = float("nan")
    with pytest.raises(EnvContractError) as caught:
        reset_poisoned(env, obs, "collector 0: mine")
    assert str(caught.value) == ("collector 0: mine: reset(env_ids=...) obs of shape (1, 3); expected float32 of "
                                 f"shape (num_envs, obs_dim) = (4, 3) on cpu {CONTRACT}: return one row per env, "
                                 "flattened to obs_dim=3 values (from observation_space.shape=(3,); fix "
                                 "observation_space if the rows are right)")


def test_a_training_env_in_another_float_dtype_than_the_evaluation_envs_is_named() -> None:
    """The training env casts to float32 what the probe of the evaluation env found it must: a field still in
    another dtype is an env whose dtype depends on num_envs.
    """
    env = breaks_contract(2, "cpu", 0, breaks="float64_obs")
    with pytest.raises(EnvContractError) as caught:
        check_training_env(env, "collector 0: mine", obs=env.reset(seed=0))
    assert str(caught.value) == ("collector 0: mine: reset returned obs as float64 with num_envs=2, float32 with "
                                 "eval_episodes envs; expected one dtype at every step and num_envs (the VecEnv "
                                 "contract, envs/base.py): return float32")
    cast = envs.as_float32(env, ("obs", "final_obs"))
    check_training_env(cast, "mine", obs=cast.reset(seed=0), step=cast.step(torch.zeros(2, 1)))


def test_an_env_without_a_time_limit_of_its_own_trains_and_evaluates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``max_episode_steps`` left unset is VecEnv's None (no limit): evaluation caps the episodes itself."""
    code, out, err = train_with("no_max_episode_steps", "sync", tmp_path, capsys)
    assert code == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["last_eval_env_steps"] == 64


def train_with(breaks: str, run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``mbpo train`` on the factory's env broken by ``breaks`` in the way of ``run``: exit code, stdout, stderr."""
    code = cli.main(["train", *FACTORY, f"env.kwargs.breaks={breaks}", *TINY, *RUNS[run], f"run_dir={tmp_path / 'r'}"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("run", list(RUNS))
def test_a_device_in_another_spelling_is_that_device(
        run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``env.device = 'cpu:0'`` names the CPU: the run trains, as with ``'cpu'`` (debug mode's hand-off checks:
    tests/device/test_checks.py).
    """
    code, out, err = train_with("device_cpu0", run, tmp_path, capsys)
    assert code == 0 and not error_lines(err), err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["env_steps"] == 64


@pytest.mark.parametrize("run", list(RUNS))
def test_a_float64_obs_is_converted_with_one_line_and_the_run_trains(
        run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = train_with("float64_obs", run, tmp_path, capsys)
    assert code == 0, err[-3000:]
    assert [line for line in err.splitlines() if "converting" in line] == [CONVERTED]
    row = json.loads(out.strip().splitlines()[-1])
    assert row["env_steps"] == 64 and row["updates"] > 0 and row["last_eval_env_steps"] == 64


def test_an_env_that_reset_seed_does_not_seed_is_one_line_and_the_run_trains(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not reproducible is not broken: the run goes on, and says once why two runs with its seed will differ."""
    code = cli.main(["train", *FACTORY, "env.kwargs.breaks=reset_ignores_seed", *TINY, *TRAINER_RUNS[trainer_run],
                     f"run_dir={tmp_path / 'r'}"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    said = [line for line in err.splitlines() if "reset(seed=" in line]
    assert len(said) == 1 and said[0].startswith(f"[mbpo] {WHO}: reset(seed=") and said[0].endswith(
        "returned other observations the second time: reset(seed=...) does not seed what the env draws, or its "
        "reset depends on more than the seed (a curriculum, a step count). The run trains; in the first case no "
        "evaluation can be repeated, and two runs with one seed differ unless the env seeds itself when built: seed "
        "every env's random draws from reset's seed (the VecEnv contract, envs/base.py)"), said
    assert json.loads(out.strip().splitlines()[-1])["env_steps"] == 64


def test_a_collector_casts_what_the_check_found_wherever_it_runs(tmp_path: Path) -> None:
    """Thread collectors share the trainer's setup; a collector process or Ray actor is sent it in its ChildSpec
    and steps its env through an EnvStepper built from it, as here.
    """
    cfg = load_config(None, [*FACTORY, "env.kwargs.breaks=float64_obs", *TINY, "trainer=async",
                             "runtime.backend=process", f"run_dir={tmp_path / 'r'}"])
    trainer = AsyncTrainer(cfg, cfg.run_dir)
    try:
        spec = pickle.loads(pickle.dumps(trainer.pool.collectors[0].spec))  # what the child is sent
    finally:
        trainer.close()
    assert spec.setup.float32_fields == ("obs", "final_obs")
    policy = make_agent(spec.setup.agent, spec.setup.observation_space, spec.setup.action_space, "cpu", 0)
    stepper = EnvStepper(0, spec.setup, spec.build_env(), policy, spec.action_seed, lambda: None)
    data = stepper.collect(0, 3).data
    assert data["obs"].dtype == data["next_obs"].dtype == torch.float32 and data.shape[0] == 6


def test_eval_converts_as_training_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "r"
    assert cli.main(["train", *FACTORY, "env.kwargs.breaks=float64_obs", *TINY, *RUNS["sync"], f"run_dir={run}"]) == 0
    capsys.readouterr()
    assert cli.main(["eval", "--checkpoint", str(run / "checkpoints/ckpt_000000000064.pt"), "--episodes", "2"]) == 0
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if "converting" in line] == [CONVERTED]
    assert json.loads(out.strip().splitlines()[-1])["episodes"] == 2


def test_on_ray_too_and_the_line_says_when_the_checked_env_has_another_num_envs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_collector_starts: None, module_ray: None) -> None:
    """The evaluation env is the one checked: with eval_episodes != env.num_envs the line says which num_envs."""
    code = cli.main(["train", *FACTORY, "env.kwargs.breaks=reward_column", *TINY, "eval_episodes=1", "trainer=async",
                     "runtime.backend=ray", f"run_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert (code, error_lines(err)) == (2, [f"error: {WHO} with num_envs=1: step returned reward of shape (1, 1); "
                                            "expected float32 of shape (num_envs,) = (1,) on cpu (the VecEnv "
                                            "contract, envs/base.py): return reward.squeeze(-1) (one value per env, "
                                            "no trailing dimension)"]), err[-3000:]
