"""Staged smoke checks: each stage prints what it saw; the first failure stops with its traceback.

Run with ``python -m mbpo.smoke [--device auto|cpu|cuda:N] [--env Pendulum-v1]``
(``./run_async_test.sh`` runs it before the test suite). Stages: env
interaction, agent action selection, the async data collector (collector
threads, bounded queue, versioned weights), dynamics models, model rollout,
and a short async MBPO run that must measurably improve the PointMass-v0 toy
task. Each stage hands its results to the next through :class:`SmokeContext`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import torch

import envs
from envs import random_actions
from envs.contract import check_reset, check_step
from mbpo.run.logs import quiet_torchrl

if TYPE_CHECKING:
    from tensordict import TensorDict

NUM_ENVS = 4


@dataclass
class SmokeContext:
    env: envs.VecEnv
    data: dict[str, Any] = field(default_factory=dict)
    """What earlier stages produced (transitions, the fitted ensemble)."""


def stage_interaction(ctx: SmokeContext) -> None:
    env, gen = ctx.env, torch.Generator().manual_seed(0)
    casts = check_reset(env, env.reset(seed=0))  # dtype, shape and device of every field: envs.contract
    for t in range(3):
        step = env.step(random_actions(env, gen))
        casts |= check_step(env, step)
        obs, reward, terminated, *_ = step
        print(f"  Step {t}: obs shape={tuple(obs.shape)}, rewards shape={tuple(reward.shape)}")
        _expect(bool(torch.isfinite(obs).all() and torch.isfinite(reward).all()), "non-finite obs/reward")
    _expect(not casts, f"the env returned {casts} where the contract says float32")
    print(f"  dtypes: obs={obs.dtype}, reward={reward.dtype}, done={terminated.dtype}; device={obs.device}")


def stage_agent(ctx: SmokeContext) -> None:
    from mbpo.agents import make_agent
    from mbpo.config import AgentConfig

    env = ctx.env
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


def stage_async_collection(ctx: SmokeContext, steps: int = 300, num_collectors: int = 2) -> None:
    """Collector threads fill the bounded queue; weights published mid-way are picked up between batches."""
    import threading

    from mbpo.agents import make_agent
    from mbpo.config import AgentConfig, EnvConfig, RayConfig
    from mbpo.runtime.backends import make_backend
    from mbpo.runtime.collectors import CollectorBatch, CollectorSetup
    from mbpo.runtime.gate import RatioGate
    from mbpo.runtime.queue import TransitionQueue
    from mbpo.runtime.weights import WeightStore

    env = ctx.env
    n, total = env.num_envs, steps * env.num_envs * num_collectors
    agent_cfg = AgentConfig(name="dqn" if env.is_discrete else "sac")
    learner = make_agent(agent_cfg, env.observation_space, env.action_space, env.device, seed=0)
    baseline = threading.active_count()
    weights = WeightStore()
    queue: TransitionQueue[CollectorBatch] = TransitionQueue(4)
    weights.publish(learner.snapshot())
    gate = RatioGate(total, n, learning_starts=total // 2, utd_ratio=0.0, train_freq=None, tolerance=0.1,
                     min_lead=32)
    setup = CollectorSetup(agent_cfg, env.observation_space, env.action_space, n, vector_steps_per_batch=32 // n,
                           learning_starts=total // 2)
    backend = make_backend("thread", setup, queue, weights, gate, num_collectors=num_collectors,
                           env=EnvConfig(id=env.spec_id or ""), env_device=str(env.device),
                           env_seed=lambda cid, _: 10 + cid, action_seed=lambda cid, _: cid,
                           thread_env=lambda cid, _: envs.make(env.spec_id or "", n, device=env.device, seed=10 + cid),
                           template_snapshot=learner.snapshot, ray=RayConfig())
    collectors = [backend.make_collector(i, 0) for i in range(num_collectors)]
    start = time.perf_counter()
    for c in collectors:
        c.start()
    batches: list[CollectorBatch] = []
    returns: list[float] = []
    max_depth = 0
    while sum(b.env_steps for b in batches) < total:
        max_depth = max(max_depth, len(queue))
        item = queue.get(timeout=0.1)
        if item is not None:
            batches.append(item)
            returns += item.episode_returns
            gate.add(ingested=item.env_steps)
            if len(batches) == 4:
                weights.publish(learner.snapshot())  # version 2, picked up between batches
        for c in collectors:
            if c.error is not None:
                raise RuntimeError(f"collector {c.collector_id} failed") from c.error
    elapsed = time.perf_counter() - start
    for c in collectors:
        c.close()
        _expect(c.join(5.0), f"collector {c.collector_id} did not stop")
    data: TensorDict = torch.cat([b.data for b in batches])  # torch.cat on TensorDicts gives a TensorDict
    per = {c.collector_id: sum(b.collector_id == c.collector_id for b in batches) for c in collectors}
    versions = sorted({b.policy_version for b in batches})
    print(f"  {num_collectors} collector threads x {n} envs: {len(batches)} batches, {data.shape[0]} transitions "
          f"in {elapsed:.2f}s; batches per collector {per}")
    print(f"  policy versions seen {versions}; queue depth max {max_depth}/{queue.max_size}, drops {queue.dropped}; "
          f"{len(returns)} episodes finished")
    _expect(all(v > 0 for v in per.values()), f"a collector pushed nothing: {per}")
    _expect(2 in versions, f"no collector picked up the published version 2: {versions}")
    _expect(bool(torch.isfinite(data["next_obs"]).all()), "non-finite transitions were collected")
    _expect(threading.active_count() == baseline, "collector threads are still running after close()")
    ctx.data["transitions"] = data


def stage_dynamics(ctx: SmokeContext) -> None:
    from mbpo.config import load_config
    from mbpo.models import DynamicsEnsemble
    from mbpo.models.termination import known_termination

    env, data = ctx.env, ctx.data["transitions"]
    cfg = load_config(None, ["model.hidden_sizes=[64,64]", "model.weight_decay=[0,0,0]", "model.max_epochs=30"]).model
    termination = known_termination(env.spec_id or "")
    ensemble = DynamicsEnsemble(cfg, env.obs_dim, env.action_space, env.device, seed=0,
                                learn_termination=termination is None)
    before = float(ensemble.evaluate(data["obs"], data["action"], data["reward"], data["next_obs"]).mean())
    start = time.perf_counter()
    fit = ensemble.fit(data["obs"], data["action"], data["reward"], data["next_obs"], data["terminated"])
    print(f"  Ensemble of {cfg.ensemble_size} on {env.device}: holdout MSE {before:.4f} -> {fit['holdout_loss']:.4f} "
          f"in {fit['epochs']} epochs ({time.perf_counter() - start:.1f}s); elites {fit['elites']}")
    print(f"  termination: {'known rule for ' + str(env.spec_id) if termination else 'learned head'}")
    _expect(fit["holdout_loss"] < before, "training did not lower the holdout error")
    ctx.data["ensemble"], ctx.data["termination"] = ensemble, termination


def stage_rollout(ctx: SmokeContext) -> None:
    from mbpo.model_based.rollouts import branched_rollouts, obs_limit_from

    env, data, ensemble = ctx.env, ctx.data["transitions"], ctx.data["ensemble"]
    gen = torch.Generator(device=env.device).manual_seed(3)

    class UniformPolicy:  # uniform random actions, on the device
        def rollout_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
            if env.is_discrete:
                return torch.randint(env.act_dim, (n, 1), generator=generator, device=env.device).float()
            return torch.rand(n, env.act_dim, generator=generator, device=env.device)

        def rollout_act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            if env.is_discrete:
                return noise[:, 0].long()
            box = cast(gym.spaces.Box, env.action_space)  # Box unless Discrete
            low = torch.as_tensor(box.low, device=env.device)
            high = torch.as_tensor(box.high, device=env.device)
            return low + (high - low) * noise

    start_obs = data["obs"][torch.randint(len(data), (256,), generator=gen, device=env.device)]
    batch, stats = branched_rollouts(start_obs, 3, UniformPolicy(), ensemble, ctx.data["termination"],
                                     obs_limit_from(data["obs"]), gen)
    print(f"  Branched {stats.started} rollouts x {stats.length} steps: {stats.stored} model transitions, "
          f"{stats.terminated} terminated, {stats.nonfinite} ended as non-finite; model version {ensemble.version}")
    _expect(stats.stored > 0 and bool(torch.isfinite(batch["next_obs"]).all()), "rollouts stored nothing finite")


POINT_MASS_MBPO = [
    "env.id=PointMass-v0", "progress=false", "total_env_steps=600", "eval_every=100", "eval_episodes=20",
    "agent.learning_starts=50", "agent.utd_ratio=5", "agent.batch_size=64", "agent.sac.hidden_sizes=[32,32]",
    "agent.sac.actor_lr=1e-3", "agent.sac.critic_lr=1e-3", "agent.sac.init_alpha=0.05", "agent.sac.gamma=0.9",
    "model.enabled=true", "model.hidden_sizes=[32,32]", "model.weight_decay=[0,0,0]", "model.train_freq=50",
    "model.rollouts_per_real=4", "model.max_epochs=30", "model.epoch_length=100", "model.rollout_schedule=[0,1,1,3]",
    "checkpoint.every=1000",
]
"""A tiny MBPO-SAC run that reliably steers PointMass-v0 to the origin (smoke stage and tests)."""


def stage_training(ctx: SmokeContext) -> None:
    from mbpo.config import load_config
    from mbpo.run.metrics import read_metrics
    from mbpo.trainers import AsyncTrainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(None, [*POINT_MASS_MBPO, f"device={ctx.env.device}", f"run_dir={run_dir}"])
        start = time.perf_counter()
        row = AsyncTrainer(config, run_dir).run()
        evals = [float(r["eval_return"]) for r in read_metrics(f"{run_dir}/metrics.csv") if r["eval_return"]]
    first, last = evals[0], sum(evals[-2:]) / 2
    print(f"  async MBPO-SAC on PointMass-v0: {row['env_steps']} env steps, {row['updates']} updates "
          f"(utd realised {row['utd_ratio_realised']:.2f}), model version {row['model_version']}, "
          f"model buffer {row['model_buffer_size']}, {time.perf_counter() - start:.1f}s")
    print(f"  eval return {first:.2f} -> {last:.2f} (mean of the last two evaluations)")
    # Holding still scores about -8 (E[x0^2] = 1/3 over 25 steps); steering to 0 scores about -0.5.
    _expect(last > -3.0 and last > first, f"MBPO did not learn PointMass: {first:.2f} -> {last:.2f}")
    # plain SAC learns PointMass too: the model's part is checked by itself
    _expect(row["model_version"] > 0 and row["model_buffer_size"] > 0,
            f"the model never trained or rolled out (model version {row['model_version']}, model buffer "
            f"{row['model_buffer_size']})")


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"unexpected: {what}")


STAGES: list[tuple[str, Callable[[SmokeContext], None]]] = [
    ("Basic environment interaction", stage_interaction),
    ("Agent action selection", stage_agent),
    ("Async data collector", stage_async_collection),
    ("Dynamics models", stage_dynamics),
    ("Model rollout", stage_rollout),
    ("Short async MBPO run", stage_training),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mbpo.smoke", description=__doc__)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--env", default="Pendulum-v1", help="env id (default: Pendulum-v1)")
    args = parser.parse_args(argv)
    quiet_torchrl()
    torch.set_num_threads(1)  # RL-sized work; more threads only contend on small machines
    device = envs.resolve_device(args.device)
    print(f"[Test] Starting simple async test with device: {device}")
    try:
        env = envs.make(args.env, NUM_ENVS, device=device, seed=0)
    except Exception:  # noqa: BLE001 - whatever went wrong is printed with its traceback and fails the run
        print("[Test] Error creating the environment:")
        traceback.print_exc()
        return 1
    print(f"[Test] Environment created: obs_dim={env.obs_dim}, act_dim={env.act_dim}")
    ctx = SmokeContext(env)
    for i, (title, stage) in enumerate(STAGES, start=1):
        print(f"[Test {i}] {title}...")
        try:
            stage(ctx)
        except Exception as exc:  # noqa: BLE001 - printed with its traceback; the first failure stops the run
            print(f"[Test {i}] Error: {exc}")
            traceback.print_exc()
            return 1
    env.close()
    print("[Test] All tests completed successfully!")
    return 0


if __name__ == "__main__":
    sys.exit(main())
