"""DevicePlan resolves devices once and turns every kind of mismatch into a clear error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import envs
from mbpo.data.replay import make_replay_buffer
from mbpo.device.plan import DeviceMismatchError, DevicePlan, device_of

pytestmark = pytest.mark.timeout(30)


def test_auto_resolves_to_cuda_if_available_else_cpu() -> None:
    plan = DevicePlan.resolve("auto")
    assert plan.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert plan.acting_device == torch.device("cpu")


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_an_env_device_this_machine_lacks_is_named_as_env_device(device: str) -> None:
    """``device=cpu env.device=cuda:N`` said ``device='cuda:N' was requested ... use device='cpu'``: the key the
    user set is env.device, and device was cpu already.
    """
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(envs.DeviceUnavailableError) as info:
        DevicePlan.for_run(device, f"cuda:{count}")
    assert str(info.value).startswith(f"env.device='cuda:{count}' was requested")
    assert "device='cuda" not in str(info.value).replace("env.device=", "")


def test_missing_gpu_is_a_clear_error() -> None:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(envs.DeviceUnavailableError, match=rf"device plan: .*cuda:{count}"):
        DevicePlan.resolve(f"cuda:{count}")


def test_everything_on_plan_passes() -> None:
    plan = DevicePlan.resolve("cpu")
    env = envs.make("Pendulum-v1", 2)
    rb = make_replay_buffer(10, "cpu", torch.Generator())
    plan.check({"env": env, "learner": nn.Linear(2, 2), "replay buffer": rb}, {"policy replica": nn.Linear(2, 2)})


@pytest.mark.parametrize(
    ("component", "name"),
    [
        (nn.Linear(2, 2, device="meta"), "learner"),
        (torch.empty(3, device="meta"), "ensemble"),
        (make_replay_buffer(10, "meta", torch.Generator()), "replay buffer"),
        ("meta", "model buffer"),
    ],
)
def test_each_component_mismatch_is_named(component: object, name: str) -> None:
    plan = DevicePlan.resolve("cpu")
    with pytest.raises(DeviceMismatchError) as info:
        plan.check({"env": envs.make("Pendulum-v1", 2), name: component})
    msg = str(info.value)
    assert f"{name}: meta   <-- expected cpu" in msg
    assert "env: cpu\n" in msg + "\n"  # the healthy component is listed too
    assert "Fix:" in msg


def test_env_on_other_device_suggests_following_the_env() -> None:
    plan = DevicePlan.resolve("cpu")
    with pytest.raises(DeviceMismatchError, match=r"(?s)env: meta.*\n.*learner: cpu.*Fix: set device=meta"):
        plan.check({"env": torch.device("meta"), "learner": nn.Linear(1, 1)})


def test_acting_replica_must_be_on_cpu() -> None:
    plan = DevicePlan.resolve("cpu")
    match = r"(?s)policy replica: meta   <-- must be cpu.*collectors always act on cpu"
    with pytest.raises(DeviceMismatchError, match=match):
        plan.check({"learner": nn.Linear(1, 1)}, {"policy replica": nn.Linear(1, 1, device="meta")})


def test_half_moved_module_is_a_mismatch() -> None:
    net = nn.Sequential(nn.Linear(1, 1), nn.Linear(1, 1, device="meta"))
    with pytest.raises(DeviceMismatchError, match="several devices: cpu, meta"):
        device_of(net)


def test_device_of_rejects_unknown_objects() -> None:
    with pytest.raises(TypeError, match="cannot tell the device of object"):
        device_of(object())


@pytest.mark.gpu
def test_cuda_and_cuda0_are_the_same_device() -> None:
    plan = DevicePlan.resolve("cuda")
    plan.check({"learner": nn.Linear(1, 1).to("cuda:0")})


@pytest.mark.parametrize(("moved", "expected"), [
    ("_replica", "policy replica: meta   <-- must be cpu"),
    ("critic", "learner critic: meta   <-- expected cpu"),
    ("target_critic", "learner target critic: meta   <-- expected cpu"),
])
def test_trainer_checks_its_components_at_start_up(tmp_path, monkeypatch: pytest.MonkeyPatch, moved: str,
                                                   expected: str) -> None:
    """A learner network or the acting replica on the wrong device is caught before any env step."""
    from mbpo.agents.sac import SAC
    from mbpo.config import load_config
    from mbpo.trainers import SyncTrainer

    real_init = SAC.__init__

    def replica_on_meta(self: SAC, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)
        setattr(self, moved, getattr(self, moved).to("meta"))

    monkeypatch.setattr(SAC, "__init__", replica_on_meta)
    cfg = load_config(None, ["device=cpu", f"run_dir={tmp_path}", "agent.sac.hidden_sizes=[8]"])
    with pytest.raises(DeviceMismatchError, match=rf"(?s)env: cpu.*{expected}"):
        SyncTrainer(cfg, tmp_path)


def test_cuda_without_an_index_is_the_current_device_not_any_cuda_device() -> None:
    from envs.device import same_device

    assert same_device("cpu:0", torch.device("cpu")) and not same_device("cpu", "meta")
    current = torch.cuda.current_device() if torch.cuda.is_available() else 0
    assert same_device("cuda", f"cuda:{current}") and not same_device("cuda", f"cuda:{current + 1}")
