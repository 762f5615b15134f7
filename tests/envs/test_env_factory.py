"""envs.make_from_factory: a callable named "package.module:callable", called with what it names, wrapped by type.

The factories live in tests/envs/factories.py; ``fake_isaaclab/`` holds test doubles of the Isaac Lab
modules that examples/isaaclab_env.py (the documented recipe) imports, since Isaac Sim cannot be
installed here (the ``fake_isaaclab`` fixture, tests/conftest.py, puts them on ``sys.path``).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
import torch

import envs
from envs.adapters.gymnasium_vector import GymnasiumVecEnv
from envs.adapters.rsl_rl import RslRlVecEnv
from envs.adapters.torchrl_env import TorchRLVecEnv
from envs.factory import EnvFactoryError, as_vec_env, load_factory
from tests.envs import factories

pytestmark = pytest.mark.timeout(60)
F = "tests.envs.factories"


def test_our_vec_env_comes_back_as_it_is_and_gets_num_envs_device_and_seed() -> None:
    env = envs.make_from_factory(f"{F}:ours", 3, device="cpu", seed=7)
    assert type(env).__name__ == "ClassicVecEnv" and env.num_envs == 3
    assert factories.calls[-1] == {"num_envs": 3, "device": "cpu", "seed": 7}
    same = envs.make("Pendulum-v1", 3, seed=7)
    assert torch.equal(env.reset(), same.reset())  # built with the seed it was handed
    ours = envs.make("Pendulum-v1", 2)
    assert as_vec_env(ours) is ours


def test_a_torchrl_env_base_goes_through_from_torchrl() -> None:
    env = envs.make_from_factory(f"{F}:torchrl_env", 4, device="cpu", seed=1)
    assert isinstance(env, TorchRLVecEnv) and env.num_envs == 4 and env.obs_dim == 3
    assert factories.calls[-1] == {"num_envs": 4, "device": "cpu"}  # it names no seed: none is passed
    env.reset(seed=0)
    obs, reward, *_ = env.step(torch.zeros(4, 1))
    assert obs.shape == (4, 3) and reward.shape == (4,)
    # the factory names no seed, so the adapter seeds the env's first reset with it, as the other adapters do
    first = [envs.make_from_factory(f"{F}:torchrl_env", 4, device="cpu", seed=1).reset() for _ in range(2)]
    assert torch.equal(first[0], first[1])


def test_a_gymnasium_vector_env_goes_through_the_gymnasium_adapter_with_the_kwargs() -> None:
    env = envs.make_from_factory(f"{F}:gymnasium_vector", 2, device="cpu", seed=5, env_id="Acrobot-v1")
    assert isinstance(env, GymnasiumVecEnv) and env.spec_id == "Acrobot-v1" and env.is_discrete
    assert factories.calls[-1] == {"num_envs": 2, "env_id": "Acrobot-v1"}
    first = env.reset()
    again = GymnasiumVecEnv.from_id("Acrobot-v1", 2, seed=5).reset()
    assert torch.equal(first, again)  # the seed applied at the first reset, as the adapter's own constructor does


@pytest.mark.parametrize("groups, read", [(("critic", "policy"), 1.0), (("policy", "actor"), 1.0)])
def test_an_rsl_rl_vec_env_reads_actor_else_isaac_labs_policy_group(groups: tuple[str, ...], read: float) -> None:
    env = envs.make_from_factory(f"{F}:rsl_rl_env", 2, seed=3, groups=groups)
    assert isinstance(env, RslRlVecEnv) and env.obs_group == ("actor" if "actor" in groups else "policy")
    assert torch.all(env.reset() == read)
    assert factories.calls[-1] == {"num_envs": 2, "seed": 3}


def test_only_the_names_a_factory_takes_are_passed() -> None:
    envs.make_from_factory(f"{F}:only_num_envs", 2, device="cpu", seed=9, extra="x")
    assert factories.calls[-1] == {"num_envs": 2, "extra": "x"}  # **options took neither device nor seed


@pytest.mark.parametrize("path, says", [
    ("tests.envs.factories", r"'tests.envs.factories' is not of the form \"package.module:callable\""),
    ("tests.envs.nope:make", r"'tests.envs.nope:make' cannot be imported: no module named 'tests.envs.nope'"),
    (f"{F}:ourss", r"names nothing: tests.envs.factories has no attribute 'ourss'; did you mean: ours\?"),
    (f"{F}:Groups.nope", r"names nothing: tests.envs.factories:Groups has no attribute 'nope'"),
    (f"{F}:NOT_CALLABLE", r"is a int, not a callable; expected a function or class"),
    (f"{F}:no_num_envs", r"takes no num_envs parameter \(no_num_envs\(n: 'int'\)"),
])
def test_a_name_that_does_not_resolve_says_what_was_expected(path: str, says: str) -> None:
    with pytest.raises(EnvFactoryError, match=says):
        load_factory(path)


@pytest.mark.parametrize("path, kwargs, says", [
    (f"{F}:ours", {"typo": 1}, r"cannot be called with device, num_envs, seed, typo \(got an unexpected keyword "
                               r"argument 'typo'\); it takes ours\(num_envs"),
    (f"{F}:a_list", {}, r"returned builtins.list; expected an envs.VecEnv, an rsl_rl VecEnv \(Isaac Lab, mjlab\), "
                        r"a batched torchrl EnvBase or a gymnasium VectorEnv$"),
    (f"{F}:single_gymnasium_env", {}, r"returned gymnasium.wrappers.common.TimeLimit \(a single gymnasium env: "
                                      r"return gymnasium.make_vec"),
    (f"{F}:unbatched_torchrl", {}, r"returned a torchrl EnvBase that does not fit our VecEnv contract: from_torchrl "
                                   r"needs a batched env"),
    (f"{F}:too_few", {}, r"built 2 envs when asked for num_envs=3; expected exactly num_envs"),
])
def test_a_call_or_return_that_does_not_fit_says_what_was_expected(path: str, kwargs: dict, says: str) -> None:
    with pytest.raises(EnvFactoryError, match=says) as info:
        envs.make_from_factory(path, 3, **kwargs)
    assert "\n" not in str(info.value) and str(info.value).startswith(f"env factory {path!r} ")


def test_the_error_survives_pickling_with_its_message() -> None:
    """A child process or Ray actor may send it back to the trainer."""
    error = pickle.loads(pickle.dumps(EnvFactoryError("a.b:c", "names nothing")))
    assert (str(error), error.path, error.problem) == ("env factory 'a.b:c' names nothing", "a.b:c", "names nothing")


def test_the_users_own_import_error_keeps_its_traceback() -> None:
    """A module the factory's module imports is missing: not a bad path, so it is not made into a one-liner."""
    with pytest.raises(ModuleNotFoundError, match="not_an_installed_module_for_mbpo_tests"):
        load_factory("tests.envs.factories_broken:make_env")


def test_the_current_directory_is_searched_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``python -m mbpo`` run from a directory would see its modules, the ``mbpo`` script sees them too."""
    (tmp_path / "my_task_for_factory_test.py").write_text(
        "import envs\n\ndef make(num_envs):\n    return envs.make('Pendulum-v1', num_envs)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert envs.make_from_factory("my_task_for_factory_test:make", 2).num_envs == 2
    assert sys.path[-1] == str(tmp_path)


def test_the_isaac_lab_recipe_starts_the_app_once_then_makes_and_wraps_the_task(fake_isaaclab: None) -> None:
    env = envs.make_from_factory("examples.isaaclab_env:make_env", 8, device="cpu", seed=4,
                                 task="Isaac-Fake-Cartpole-v0")
    from isaaclab import app

    assert app.launches == [{"headless": True, "device": "cpu"}]
    assert isinstance(env, RslRlVecEnv) and env.obs_group == "policy" and env.num_envs == 8 and env.obs_dim == 2
    assert env.env.cfg.seed == 4 and env.max_episode_steps == 20
    env.reset(seed=0)
    for _ in range(20):
        _, _, terminated, truncated, info = env.step(torch.zeros(8, 1))
    assert bool(truncated.all()) and not bool(info["final_obs_valid"].any())  # Isaac Lab loses the last obs
    with pytest.raises(RuntimeError, match="Simulation context already exists"):  # one simulation per process
        envs.make_from_factory("examples.isaaclab_env:make_env", 2, task="Isaac-Fake-Cartpole-v0")
    env.close()
    again = envs.make_from_factory("examples.isaaclab_env:make_env", 2, task="Isaac-Fake-Cartpole-v0")
    assert again.num_envs == 2 and len(app.launches) == 1  # the app is started once per process
    again.close()


@pytest.mark.parametrize("num_envs", [8, 1])
def test_an_isaac_lab_env_returned_without_its_rsl_rl_wrapper_is_told_to_wrap_it(
        fake_isaaclab: None, num_envs: int) -> None:
    """A batched gymnasium env (4,096 envs in one simulation) was told to make_vec num_envs copies of itself."""
    from types import SimpleNamespace

    from isaaclab.envs import ManagerBasedRLEnv

    cfg = SimpleNamespace(scene=SimpleNamespace(num_envs=num_envs), sim=SimpleNamespace(device="cpu"),
                          episode_length=10, seed=0)
    with pytest.raises(EnvFactoryError, match=rf"returned isaaclab.envs.ManagerBasedRLEnv \(a gymnasium env of "
                       rf"{num_envs} envs, as Isaac Lab's gym.make\(task, cfg=...\) builds: return it wrapped in "
                       r"Isaac Lab's RslRlVecEnvWrapper \(isaaclab_rl.rsl_rl\), an rsl_rl VecEnv\)") as info:
        envs.as_vec_env(ManagerBasedRLEnv(cfg), path="my_isaac:make_env")
    assert "make_vec" not in str(info.value)
