"""Async against sync MBPO on native Pendulum-v1, in one invocation (prints one JSON line).

Three comparisons, each against its peer from the same run:

* ``equal_work``: ``configs/pendulum_mbpo.yaml`` for ``--steps`` env steps, same seed, same update
  count, sync then async, ``--repeats`` pairs: ``async_over_sync`` wall-clock, the median of the pairs'
  ratios (target <= 0.7 on this 2-core CPU; single runs of the same pair vary by 10-15% here).
* ``slow_env``: every env step takes 5 ms (a slow simulator, envs.faults ``slow``); ``--slow-utd``
  updates per step. Async wall-clock against max(collection alone, learning alone):
  collection alone = the same steps through the slow env acting with the CPU policy and no learner;
  learning alone = the sync trainer on the fast env (env time is negligible there).
  Target: ``async_over_bound`` <= 1.2.
* ``threshold`` (``--seeds``): env steps to threshold (as benchmarks/sample_efficiency.py defines it:
  first evaluation, every 200 steps on 50 episodes, after which the mean return stays >= -200) for
  sync and async MBPO, 2,000-step budget. Target: async median within 25% of sync's.

    python benchmarks/async_vs_sync.py [--steps 1000] [--repeats 3] [--seeds 0 1 2]
        [--only equal_work slow_env threshold]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

import envs
from envs.faults import FaultyEnv
from mbpo.run.logs import quiet_torchrl

CONFIG = "configs/pendulum_mbpo.yaml"
DELAY_S = 0.005


def train(trainer: str, overrides: list[str], env_factory: Any = None) -> dict[str, Any]:
    from mbpo.config import load_config
    from mbpo.run.metrics import eval_curve
    from mbpo.trainers import AsyncTrainer, SyncTrainer

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = load_config(CONFIG, ["device=cpu", "progress=false", f"run_dir={run_dir}", f"trainer={trainer}",
                                   *overrides])
        start = time.perf_counter()
        if trainer == "async":
            t = AsyncTrainer(cfg, run_dir, env_factory=env_factory)
        else:
            t = SyncTrainer(cfg, run_dir)
        row = t.run()
        wall = time.perf_counter() - start
        evals = eval_curve(f"{run_dir}/metrics.csv")
    return {"wall_s": round(wall, 2), "updates": row["updates"], "env_steps": row["env_steps"],
            "final_eval_return": round(row["eval_return"], 1) if row.get("eval_return") is not None else None,
            "learner_busy": row.get("learner_busy"), "model_busy": row.get("model_busy"), "evals": evals}


def equal_work(steps: int, repeats: int) -> dict[str, Any]:
    """Sync then async, ``repeats`` times (interleaved, so machine noise hits both alike); the ratio is the
    median of the per-pair ratios.
    """
    common = [f"total_env_steps={steps}", f"eval_every={10 * steps}", f"checkpoint.every={steps}"]
    pairs = []
    for _ in range(repeats):
        sync, async_ = train("sync", common), train("async", common)
        for r in (sync, async_):
            r.pop("evals")
        pairs.append({"sync": sync, "async": async_, "async_over_sync": round(async_["wall_s"] / sync["wall_s"], 3)})
    return {"env_steps": steps, "pairs": pairs,
            "async_over_sync": round(statistics.median(p["async_over_sync"] for p in pairs), 3)}


def collection_alone(steps: int, seed: int = 0) -> float:
    """The slow env stepped ``steps`` times, acting with a fresh CPU policy: no learner at all."""
    from mbpo.agents import make_agent
    from mbpo.config import load_config

    cfg = load_config(CONFIG, ["device=cpu"])
    env = FaultyEnv(envs.make("Pendulum-v1", 1, device="cpu", seed=seed), "slow", delay_s=DELAY_S)
    agent = make_agent(cfg.agent, env.observation_space, env.action_space, "cpu", seed)
    obs = env.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        obs = env.step(agent.act(obs, explore=True))[0]
    return time.perf_counter() - start


def slow_env(steps: int, utd: float) -> dict[str, Any]:
    common = [f"total_env_steps={steps}", f"eval_every={10 * steps}", f"checkpoint.every={steps}",
              f"agent.utd_ratio={utd}"]

    def slow_factory(collector_id: int, incarnation: int, seed: int) -> envs.VecEnv:
        return FaultyEnv(envs.make("Pendulum-v1", 1, device="cpu", seed=seed), "slow", delay_s=DELAY_S)

    collect = collection_alone(steps)
    learn = train("sync", common)
    async_ = train("async", common, env_factory=slow_factory)
    learn.pop("evals"), async_.pop("evals")
    bound = max(collect, learn["wall_s"])
    return {"env_steps": steps, "utd_ratio": utd, "env_step_delay_s": DELAY_S,
            "collection_alone_s": round(collect, 2), "learning_alone_s": learn["wall_s"], "async": async_,
            "async_over_bound": round(async_["wall_s"] / bound, 3)}


def threshold(seeds: list[int]) -> dict[str, Any]:
    from sample_efficiency import EVAL_EPISODES, EVAL_EVERY, steps_to_threshold

    common = ["total_env_steps=2000", f"eval_every={EVAL_EVERY}", f"eval_episodes={EVAL_EPISODES}",
              "checkpoint.every=2000"]
    out: dict[str, Any] = {}
    for trainer in ("sync", "async"):
        runs = [train(trainer, [*common, f"seed={s}"]) for s in seeds]
        steps = [steps_to_threshold(r["evals"]) for r in runs]
        known = sorted(s if s is not None else float("inf") for s in steps)
        median = statistics.median(known)
        out[trainer] = {"steps_to_threshold": steps, "median": None if median == float("inf") else median,
                        "wall_s": [r["wall_s"] for r in runs],
                        "evals": [[(s, round(v, 1)) for s, v in r["evals"]] for r in runs]}
    s, a = out["sync"]["median"], out["async"]["median"]
    if s is not None and a is not None:
        out["async_over_sync"] = round(a / s, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="env steps of equal_work and slow_env")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved sync/async pairs of equal_work")
    parser.add_argument("--slow-utd", type=float, default=1.0, help="utd_ratio of the slow_env comparison")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", choices=["equal_work", "slow_env", "threshold"],
                        default=["equal_work", "slow_env", "threshold"])
    args = parser.parse_args()
    quiet_torchrl()
    torch.set_num_threads(1)
    result: dict[str, Any] = {"benchmark": "async_vs_sync", "env": "Pendulum-v1", "config": CONFIG,
                              "cpu_threads": torch.get_num_threads()}
    if "equal_work" in args.only:
        result["equal_work"] = equal_work(args.steps, args.repeats)
    if "slow_env" in args.only:
        result["slow_env"] = slow_env(args.steps, args.slow_utd)
    if "threshold" in args.only:
        result["threshold"] = threshold(args.seeds)
    targets = {}
    if "equal_work" in result:
        targets["async_at_most_0.7x_sync"] = result["equal_work"]["async_over_sync"] <= 0.7
    if "slow_env" in result:
        targets["slow_env_within_20pct_of_bound"] = result["slow_env"]["async_over_bound"] <= 1.2
    if result.get("threshold", {}).get("async_over_sync") is not None:
        targets["threshold_within_25pct"] = abs(result["threshold"]["async_over_sync"] - 1) <= 0.25
    result["targets"] = targets
    print(json.dumps(result))


if __name__ == "__main__":
    main()
