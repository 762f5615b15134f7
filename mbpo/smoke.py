"""Staged smoke checks: each stage prints what it saw; the first failure stops with its traceback.

Run with ``python -m mbpo.smoke [--device auto|cpu|cuda:N] [--env Pendulum-v1]``
(``./run_async_test.sh`` runs it before the test suite). Stages: env
interaction, agent action selection, random-action collection, a short
training run. Collector, dynamics and rollout stages come with those parts.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import traceback
from typing import Callable

import torch

import envs
from envs import random_actions

NUM_ENVS = 4


def stage_interaction(env: envs.VecEnv) -> None:
    gen = torch.Generator().manual_seed(0)
    obs = env.reset(seed=0)
    _expect(obs.shape == (env.num_envs, env.obs_dim), f"reset obs shape {tuple(obs.shape)}")
    for t in range(3):
        obs, reward, terminated, truncated, info = env.step(random_actions(env, gen))
        print(f"  Step {t}: obs shape={tuple(obs.shape)}, rewards shape={tuple(reward.shape)}")
        for name, x, dtype, shape in (
            ("obs", obs, torch.float32, (env.num_envs, env.obs_dim)),
            ("reward", reward, torch.float32, (env.num_envs,)),
            ("terminated", terminated, torch.bool, (env.num_envs,)),
            ("truncated", truncated, torch.bool, (env.num_envs,)),
            ("final_obs", info["final_obs"], torch.float32, (env.num_envs, env.obs_dim)),
        ):
            _expect(x.dtype == dtype and tuple(x.shape) == shape, f"{name}: {x.dtype} {tuple(x.shape)}")
            _expect(x.device == env.device, f"{name} is on {x.device}, env on {env.device}")
        _expect(bool(torch.isfinite(obs).all() and torch.isfinite(reward).all()), "non-finite obs/reward")
    print(f"  dtypes: obs={obs.dtype}, reward={reward.dtype}, done={terminated.dtype}; device={obs.device}")


def stage_random_collection(env: envs.VecEnv, steps: int = 300) -> None:
    gen = torch.Generator().manual_seed(1)
    env.reset(seed=1)
    episodes, ret, returns = 0, torch.zeros(env.num_envs, device=env.device), []
    start = time.perf_counter()
    for _ in range(steps):
        _, reward, terminated, truncated, _ = env.step(random_actions(env, gen))
        ret += reward
        done = terminated | truncated
        if bool(done.any()):
            returns += ret[done].tolist()
            episodes += int(done.sum())
            ret[done] = 0.0
    elapsed = time.perf_counter() - start
    mean = sum(returns) / len(returns) if returns else float("nan")
    print(f"  Collected {steps} steps x {env.num_envs} envs = {steps * env.num_envs} transitions "
          f"in {elapsed:.2f}s; {episodes} episodes finished, mean return {mean:.1f}")
    _expect(episodes > 0, f"no episode finished in {steps} steps (time limit {env.max_episode_steps})")


def stage_agent(env: envs.VecEnv) -> None:
    from mbpo.agents import make_agent
    from mbpo.config import AgentConfig

    agent = make_agent(AgentConfig(name="dqn" if env.is_discrete else "sac"), env.observation_space,
                       env.action_space, env.device, seed=0)
    obs = env.reset(seed=2).cpu()
    for i, explore in enumerate((True, False)):
        action = agent.act(obs, explore=explore)
        print(f"  Action {i}: shape={tuple(action.shape)}, dtype={action.dtype}, device={action.device}, "
              f"explore={explore}")
        _expect(action.device.type == "cpu", f"the acting replica returned actions on {action.device}")
        env.step(action.to(env.device))  # the env validates shape, dtype, range and finiteness
    print(f"  {type(agent).__name__} learner on {agent.device}, acting replica on cpu")


def stage_training(env: envs.VecEnv) -> None:
    from mbpo.config import load_config
    from mbpo.trainers import SyncTrainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(None, [
            f"env.id={env.spec_id}", f"device={env.device}", f"agent.name={'dqn' if env.is_discrete else 'sac'}",
            f"run_dir={run_dir}", "progress=false", "total_env_steps=400", "eval_every=400", "eval_episodes=2",
            "agent.learning_starts=200", "agent.batch_size=32", "agent.sac.hidden_sizes=[32,32]",
            "agent.dqn.hidden_sizes=[32,32]", "checkpoint.every=400",
        ])
        row = SyncTrainer(config, run_dir).run()
        print(f"  {row['env_steps']} env steps, {row['updates']} updates, eval return {row['eval_return']:.1f}, "
              f"checkpoint written: {bool(list((__import__('pathlib').Path(run_dir) / 'checkpoints').iterdir()))}")
        _expect(row["updates"] > 0 and row["eval_return"] is not None, f"training row {row}")


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"unexpected: {what}")


STAGES: list[tuple[str, Callable[[envs.VecEnv], None]]] = [
    ("Basic environment interaction", stage_interaction),
    ("Agent action selection", stage_agent),
    ("Random-action collection", stage_random_collection),
    ("Short training run", stage_training),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mbpo.smoke", description=__doc__)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--env", default="Pendulum-v1", help="env id (default: Pendulum-v1)")
    args = parser.parse_args(argv)
    logging.getLogger("torchrl").setLevel(logging.WARNING)
    device = envs.resolve_device(args.device)
    print(f"[Test] Starting simple async test with device: {device}")
    try:
        env = envs.make(args.env, NUM_ENVS, device=device, seed=0)
    except Exception:
        print("[Test] Error creating the environment:")
        traceback.print_exc()
        return 1
    print(f"[Test] Environment created: obs_dim={env.obs_dim}, act_dim={env.act_dim}")
    for i, (title, stage) in enumerate(STAGES, start=1):
        print(f"[Test {i}] {title}...")
        try:
            stage(env)
        except Exception as exc:
            print(f"[Test {i}] Error: {exc}")
            traceback.print_exc()
            return 1
    env.close()
    print("[Test] All tests completed successfully!")
    return 0


if __name__ == "__main__":
    sys.exit(main())
