"""Debug mode's hand-off checks name the bad transition: here an action index outside a Discrete space,
which on a GPU would otherwise surface as a device-side assert at some later kernel.
"""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

import envs
from envs.faults import FaultyEnv
from mbpo import cli
from mbpo.device.checks import HandoffError, check_transitions
from tests.conftest import TRAINER_RUNS

pytestmark = pytest.mark.timeout(120)


def batch(actions: list[int]) -> TensorDict:
    b = len(actions)
    return TensorDict({"obs": torch.zeros(b, 4), "next_obs": torch.zeros(b, 4), "reward": torch.zeros(b),
                       "terminated": torch.zeros(b, dtype=torch.bool),
                       "action": torch.tensor(actions, dtype=torch.int64)}, batch_size=[b])


def test_a_discrete_action_outside_the_space_is_named_with_its_row_and_the_range() -> None:
    check_transitions(batch([0, 1, 1]), "here", torch.device("cpu"), 4, gym.spaces.Discrete(2))
    with pytest.raises(HandoffError, match=r"here: action row 2 is 2; the action space Discrete\(2\) allows \[0, 2\)"):
        check_transitions(batch([0, 1, 2]), "here", torch.device("cpu"), 4, gym.spaces.Discrete(2))
    with pytest.raises(HandoffError, match="action row 0 is -1"):
        check_transitions(batch([-1]), "here", torch.device("cpu"), 4, gym.spaces.Discrete(2))


def test_a_hand_off_to_the_cpu_spelled_cpu_0_passes_and_one_to_another_device_does_not() -> None:
    """Debug mode's checks refused an env on 'cpu:0' at every hand-off ('obs is on cpu; expected cpu:0'), on
    every backend: each runs this check where a batch changes hands.
    """
    check_transitions(batch([0, 1]), "here", torch.device("cpu:0"), 4, gym.spaces.Discrete(2))
    check_transitions(batch([0, 1]), "here", "cpu:0", 4, gym.spaces.Discrete(2))
    with pytest.raises(HandoffError, match="here: obs is on cpu; expected meta"):
        check_transitions(batch([0, 1]), "here", torch.device("meta"), 4, gym.spaces.Discrete(2))


def test_the_bad_action_fault_edits_the_handed_tensor_and_steps_with_the_original() -> None:
    env = FaultyEnv(envs.make("CartPole-v1", 3, seed=0), "bad_action", at_step=2, env_index=1)
    twin = envs.make("CartPole-v1", 3, seed=0)
    env.reset(seed=0), twin.reset(seed=0)
    for step in (1, 2, 3):
        actions = torch.tensor([1, 0, 1])
        obs, *_ = env.step(actions)
        assert torch.equal(obs, twin.step(torch.tensor([1, 0, 1]))[0])  # the env stepped the valid actions
        assert actions.tolist() == ([1, 2, 1] if step == 2 else [1, 0, 1])
    with pytest.raises(ValueError, match="needs a Discrete action space"):
        FaultyEnv(envs.make("Pendulum-v1", 1), "bad_action")


def test_debug_mode_stops_a_run_at_the_collector_that_handed_over_a_bad_action(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --debug the same run dies in the learner's gather (on a GPU: a device-side assert)."""
    args = ["train", "--config", "configs/cartpole_dqn.yaml", "env.id=FaultyCartPole-v0",
            "env.factory=envs.faults:faulty", "env.kwargs={at_step: 3}", "total_env_steps=600",
            "agent.learning_starts=100", "eval_every=300", "eval_episodes=2", "device=cpu",
            "runtime.max_restarts=0"]
    capsys.readouterr()
    assert cli.main(["--debug", *args, f"run_dir={tmp_path / 'debug'}"]) == 1  # the run failed, its traceback shown
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and re.search(r"collector 0 failed; restart budget spent \(0/0\): .*collector 0 -> queue: "
                                         r"action row 2 is 2; the action space Discrete\(2\) allows \[0, 2\)",
                                         error[0]), error
    with pytest.raises(RuntimeError, match="index 2 is out of bounds"):
        cli.main([*args, f"run_dir={tmp_path / 'plain'}"])


def test_debug_mode_stops_a_sync_run_where_the_env_handed_over_a_bad_action(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """trainer=sync took --debug and did none of it: no anomaly detection, no hand-off checks, no report; the run
    died in the learner's gather as without --debug. The trainer steps the env itself: its hand-off is the env's.
    """
    from mbpo.device.checks import HandoffError

    args = ["--debug", "train", "--config", "configs/cartpole_dqn.yaml", "env.id=FaultyCartPole-v0",
            "env.factory=envs.faults:faulty", "env.kwargs={at_step: 3}", "total_env_steps=600", "trainer=sync",
            "agent.learning_starts=100", "eval_every=300", "eval_episodes=2", "device=cpu", f"run_dir={tmp_path}"]
    capsys.readouterr()
    with pytest.raises(HandoffError, match=r"env -> replay buffer: action row 0 is 2; the action space Discrete\(2\) "
                                           r"allows \[0, 2\)"):
        cli.main(args)
    err = capsys.readouterr().err
    assert "[mbpo debug] autograd anomaly detection: on" in err and "collectors: none (trainer=sync" in err
    assert "hand-off checks (device, dtype, shape, finiteness, actions inside the Discrete space): on at env -> " \
           "replay buffer, replay -> learner" in err
    assert not torch.is_anomaly_enabled()  # restored after the run


def test_the_debug_report_names_only_the_checks_the_run_makes() -> None:
    """A DQN run without a model was told of model and elite-index checks, and not of the action-bounds check."""
    from mbpo.device.checks import switches

    dqn = "\n".join(switches(4, "thread", model=False, discrete=True))
    assert "collectors: 1 (config asked 4)" in dqn and "actions inside the Discrete space" in dqn
    assert "model" not in dqn.replace("model.", "") and "elite" not in dqn
    mbpo = "\n".join(switches(2, "thread", model=True))
    assert "model rollouts -> model buffer" in mbpo and "elite indices" in mbpo and "Discrete" not in mbpo


def test_debug_mode_stops_every_trainer_and_backend_at_the_hand_off_of_a_bad_action(
        trainer_run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same guard on each trainer and backend: the bad action is named where it is handed over (the env's
    batch on sync, the collector's on the others) and the run stops; none trains on it.
    """
    args = ["--debug", "train", "--config", "configs/cartpole_dqn.yaml", "env.id=FaultyCartPole-v0",
            "env.factory=envs.faults:faulty", "env.kwargs={at_step: 3}", "total_env_steps=200", "eval_every=1000",
            "agent.learning_starts=100", "agent.dqn.hidden_sizes=[16,16]", "device=cpu", "runtime.max_restarts=0",
            "runtime.collection_batch_size=16", *TRAINER_RUNS[trainer_run], f"run_dir={tmp_path}"]
    capsys.readouterr()
    bad = r"action row \d+ is 2; the action space Discrete\(2\) allows \[0, 2\)"
    if trainer_run == "sync":
        with pytest.raises(HandoffError, match=rf"env -> replay buffer: {bad}"):
            cli.main(args)
        return
    assert cli.main(args) == 1
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and re.search(rf"collector 0 failed; restart budget spent \(0/0\): .*{bad}", error[0]), error
