"""Device discipline with a real Isaac Lab-API env (mjlab on CPU): auto follows the env, a mismatch
is caught at start-up before any step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mbpo.config import load_config
from mbpo.device.plan import DeviceMismatchError, DevicePlan
from mbpo.trainers import AsyncTrainer

pytestmark = pytest.mark.timeout(300)  # the first mjlab env on a machine compiles Warp kernels (~30 s)

MJLAB = ["env.id=Mjlab-Cartpole-Balance", "env.num_envs=2", "eval_episodes=2", "agent.sac.hidden_sizes=[16]",
         "progress=false"]


@pytest.fixture(autouse=True)
def _needs_mjlab() -> None:
    pytest.importorskip("mjlab", reason="mjlab is not installed (pip install -e '.[mjlab]')")


def test_auto_with_an_mjlab_env_on_cpu_plans_everything_on_cpu(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # plain auto would now pick cuda
    cfg = load_config(None, [*MJLAB, "device=auto", "env.device=cpu", f"run_dir={tmp_path}"])
    trainer = AsyncTrainer(cfg, tmp_path)
    try:
        assert trainer.plan.device == torch.device("cpu")
        assert trainer.env.device == torch.device("cpu")
        assert {str(p.device) for net in trainer.agent.networks.values() for p in net.parameters()} == {"cpu"}
    finally:
        trainer.close()


def test_learner_asked_onto_another_device_than_the_env_fails_before_any_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The env is built on cpu, the learner is asked onto another device (meta stands in for a GPU this
    machine lacks; the gpu-marked test below uses a real one).
    """
    from envs.adapters.rsl_rl import RslRlVecEnv

    steps: list[int] = []
    real_step = RslRlVecEnv.step
    monkeypatch.setattr(RslRlVecEnv, "step", lambda self, a: (steps.append(1), real_step(self, a))[1])
    monkeypatch.setattr(DevicePlan, "resolve", classmethod(lambda cls, req: cls(torch.device("meta"), req)))
    cfg = load_config(None, [*MJLAB, "device=cuda:0", "env.device=cpu", f"run_dir={tmp_path}"])
    with pytest.raises(DeviceMismatchError, match=r"(?s)env: cpu\s+<-- expected meta.*Fix: set device=cpu"):
        AsyncTrainer(cfg, tmp_path)
    assert steps == []


@pytest.mark.gpu
def test_mjlab_env_on_cpu_with_the_learner_on_cuda_fails_before_any_step(tmp_path: Path, cuda_device: str) -> None:
    cfg = load_config(None, [*MJLAB, f"device={cuda_device}", "env.device=cpu", f"run_dir={tmp_path}"])
    with pytest.raises(DeviceMismatchError, match="env: cpu"):
        AsyncTrainer(cfg, tmp_path)
