"""Sample efficiency: MBPO against model-free learners, same seeds, one invocation.

``--task pendulum`` (default): MBPO-SAC against SAC (two ratios) and Stable-Baselines3 SAC.

One invocation, same seeds, four learners:

* ``mbpo``: configs/pendulum_mbpo.yaml (20 updates per real transition, half of each batch model data);
* ``sac_same_ratio``: the same config with model.enabled=false (20 updates, real data only):
  isolates what the model adds from what the extra updates add;
* ``sac_utd1``: the same with model.enabled=false agent.utd_ratio=1;
* ``sb3``: Stable-Baselines3 SAC with rl-zoo's Pendulum hyperparameters (lr 1e-3), on gymnasium Pendulum-v1.

Every learner is evaluated every 200 env steps (one episode) on 50 deterministic
episodes. Env steps to threshold = the first evaluation after which the mean
return stays at -200 or better until the end of the budget. 50, not 10: the
optimal Pendulum policy averages -138 with a per-episode sd of 76 over random
starts, so its own 10-episode mean falls below -200 on 0.5% of evaluations and a
policy 20 short of optimal fails one of ten evaluations in about 40% of runs;
50-episode means of the optimum stay above -164. Prints one JSON line
with per-seed figures and medians. ``--jobs 2`` runs two (learner, seed) pairs at once.

``--task cartpole``: MBPO-DQN (configs/cartpole_mbpo.yaml) against the project's
DQN (configs/cartpole_dqn.yaml); env steps to the first evaluation (every 500
steps, 10 episodes) reaching 475. Target: MBPO-DQN needs at most a third.

    python benchmarks/sample_efficiency.py [--task pendulum|cartpole] [--seeds 0 1 2] [--jobs 2] [--only ...]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import tempfile
import time
from typing import Any

from mbpo.run.logs import quiet_torchrl

THRESHOLD = -200.0
EVAL_EVERY = 200
EVAL_EPISODES = 50
BUDGETS = {"mbpo": 2000, "sac_same_ratio": 2000, "sac_utd1": 8000, "sb3": 8000}
OVERRIDES = {
    "mbpo": [],
    "sac_same_ratio": ["model.enabled=false"],
    "sac_utd1": ["model.enabled=false", "agent.utd_ratio=1"],
}
# CartPole: (config, budget); "reaches" = first eval at or above 475, every 500 env steps.
CARTPOLE = {"mbpo_dqn": ("configs/cartpole_mbpo.yaml", 15_000), "dqn": ("configs/cartpole_dqn.yaml", 50_000)}
CARTPOLE_TARGET, CARTPOLE_EVAL_EVERY, CARTPOLE_EVAL_EPISODES = 475.0, 500, 10


def steps_to_threshold(evals: list[tuple[int, float]], threshold: float = THRESHOLD) -> int | None:
    """First eval step after which every eval (itself included) is at or above ``threshold``."""
    reached = None
    for step, ret in evals:
        if ret >= threshold:
            reached = step if reached is None else reached
        else:
            reached = None
    return reached


def first_reaching(evals: list[tuple[int, float]], target: float = CARTPOLE_TARGET) -> int | None:
    """First eval step at or above ``target`` (what happens after it does not count)."""
    return next((step for step, ret in evals if ret >= target), None)


def run_ours(variant: str, seed: int) -> list[tuple[int, float]]:
    from mbpo.config import load_config
    from mbpo.run.metrics import eval_curve
    from mbpo.trainers import SyncTrainer

    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config("configs/pendulum_mbpo.yaml", [
            f"seed={seed}", "device=cpu", f"run_dir={run_dir}", "progress=false", f"eval_every={EVAL_EVERY}",
            f"eval_episodes={EVAL_EPISODES}", f"total_env_steps={BUDGETS[variant]}",
            f"checkpoint.every={BUDGETS[variant]}", *OVERRIDES[variant],
        ])
        SyncTrainer(config, run_dir).run()
        return eval_curve(f"{run_dir}/metrics.csv")


def run_sb3(seed: int) -> list[tuple[int, float]]:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    eval_env = gym.make_vec("Pendulum-v1", num_envs=EVAL_EPISODES, vectorization_mode="sync")
    evals: list[tuple[int, float]] = []

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                obs, _ = eval_env.reset(seed=seed + 1_000_003 + self.num_timesteps)
                returns, running = np.zeros(EVAL_EPISODES), np.ones(EVAL_EPISODES, dtype=bool)
                while running.any():
                    action, _ = self.model.predict(obs, deterministic=True)
                    obs, reward, term, trunc, _ = eval_env.step(action)
                    returns += reward * running
                    running &= ~(term | trunc)
                evals.append((self.num_timesteps, float(returns.mean())))
            return True

    # rl-zoo hyperparams/sac.yml, Pendulum-v1: learning_rate 1e-3 (everything else SB3's defaults).
    model = SAC("MlpPolicy", gym.make("Pendulum-v1"), learning_rate=1e-3, seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=BUDGETS["sb3"], callback=Evaluate())
    return evals


def run_cartpole(variant: str, seed: int) -> list[tuple[int, float]]:
    from mbpo.config import load_config
    from mbpo.run.metrics import eval_curve
    from mbpo.trainers import SyncTrainer

    path, budget = CARTPOLE[variant]
    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(path, [
            f"seed={seed}", "device=cpu", f"run_dir={run_dir}", "progress=false", f"total_env_steps={budget}",
            f"eval_every={CARTPOLE_EVAL_EVERY}", f"eval_episodes={CARTPOLE_EVAL_EPISODES}",
            f"checkpoint.every={budget}",
        ])
        SyncTrainer(config, run_dir).run()
        return eval_curve(f"{run_dir}/metrics.csv")


def job(args: tuple[str, int]) -> dict[str, Any]:
    variant, seed = args
    import torch

    torch.set_num_threads(1)
    quiet_torchrl()  # torchrl logs to stdout: keep it one JSON line
    start = time.perf_counter()
    if variant in CARTPOLE:
        evals = run_cartpole(variant, seed)
        reached = first_reaching(evals)
        return {"variant": variant, "seed": seed, "env_steps_to_475": reached,
                "final_eval_return": round(evals[-1][1], 1), "wall_s": round(time.perf_counter() - start, 1),
                "evals": [(s, round(r, 1)) for s, r in evals]}
    evals = run_sb3(seed) if variant == "sb3" else run_ours(variant, seed)
    return {"variant": variant, "seed": seed, "env_steps_to_threshold": steps_to_threshold(evals),
            "final_eval_return": round(evals[-1][1], 1), "wall_s": round(time.perf_counter() - start, 1),
            "evals": [(s, round(r, 1)) for s, r in evals]}


def cartpole_summary(runs: list[dict[str, Any]], variants: list[str], seeds: list[int]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for variant in variants:
        steps = [r["env_steps_to_475"] for r in runs if r["variant"] == variant]
        known = sorted(s if s is not None else float("inf") for s in steps)
        median = statistics.median(known)
        summary[variant] = {"budget_env_steps": CARTPOLE[variant][1], "steps_to_475": steps,
                            "median": None if median == float("inf") else median}
    result: dict[str, Any] = {"benchmark": "sample_efficiency", "env": "CartPole-v1", "target_return": 475.0,
                              "eval_every": CARTPOLE_EVAL_EVERY, "seeds": seeds, "summary": summary, "runs": runs}
    mbpo, dqn = summary.get("mbpo_dqn", {}).get("median"), summary.get("dqn", {}).get("median")
    if mbpo is not None and dqn is not None:
        result["mbpo_over_dqn"] = round(mbpo / dqn, 3)
        result["targets"] = {"mbpo_dqn_at_most_a_third_of_dqn": mbpo <= dqn / 3}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1, help="(learner, seed) runs in parallel, one thread each")
    parser.add_argument("--task", choices=["pendulum", "cartpole"], default="pendulum")
    parser.add_argument("--only", nargs="+", choices=sorted(BUDGETS) + sorted(CARTPOLE), default=None)
    args = parser.parse_args()
    variants = args.only or sorted(BUDGETS if args.task == "pendulum" else CARTPOLE)
    tasks = [(v, s) for v in variants for s in args.seeds]
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            runs = pool.map(job, tasks, chunksize=1)
    else:
        runs = [job(t) for t in tasks]
    if args.task == "cartpole":
        print(json.dumps(cartpole_summary(runs, variants, args.seeds)))
        return
    summary: dict[str, Any] = {}
    for variant in variants:
        steps = [r["env_steps_to_threshold"] for r in runs if r["variant"] == variant]
        known = sorted(s if s is not None else float("inf") for s in steps)
        median = statistics.median(known)
        summary[variant] = {"budget_env_steps": BUDGETS[variant], "steps_to_threshold": steps,
                            "median": None if median == float("inf") else median}
    result: dict[str, Any] = {"benchmark": "sample_efficiency", "env": "Pendulum-v1", "threshold": THRESHOLD,
                              "eval_every": EVAL_EVERY, "seeds": args.seeds, "summary": summary, "runs": runs}
    mbpo, sb3 = summary.get("mbpo", {}).get("median"), summary.get("sb3", {}).get("median")
    if mbpo is not None:
        result["targets"] = {"mbpo_median_at_most_1500": mbpo <= 1500}
        if sb3 is not None:
            result["targets"]["mbpo_at_most_half_of_sb3"] = mbpo <= 0.5 * sb3
            result["mbpo_over_sb3"] = round(mbpo / sb3, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
