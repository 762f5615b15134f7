"""Does the reference trainer learn? SAC on native Pendulum-v1, DQN on native CartPole-v1.

Prints one JSON line: for each seed, the first evaluation (deterministic
policy, 10 episodes) whose mean return reaches the target, and the env steps
it took. Targets: SAC Pendulum -200 within 10,000 env steps for 3 of 3 seeds;
DQN CartPole 475 within 50,000 env steps for 2 of 3 seeds.

    python benchmarks/learning.py [--only sac|dqn] [--seeds 0 1 2] [--precision fp32|bf16] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import torch

from mbpo.config import load_config
from mbpo.run.logs import quiet_torchrl
from mbpo.run.metrics import eval_curve
from mbpo.trainers import SyncTrainer

TASKS = {
    "sac": {"config": "configs/pendulum_sac.yaml", "target": -200.0, "budget": 10_000, "eval_every": 500,
            "need": 3},
    "dqn": {"config": "configs/cartpole_dqn.yaml", "target": 475.0, "budget": 50_000, "eval_every": 1_000,
            "need": 2},
}


def run_seed(task: dict[str, Any], seed: int, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as run_dir:
        config = load_config(task["config"], [
            f"seed={seed}", "device=cpu", f"total_env_steps={task['budget']}", f"eval_every={task['eval_every']}",
            f"run_dir={run_dir}", "progress=false", f"checkpoint.every={task['budget']}",
            f"torch_threads={torch.get_num_threads()}", *extra,
        ])
        start = time.perf_counter()
        SyncTrainer(config, run_dir).run()
        wall = time.perf_counter() - start
        evals = eval_curve(f"{run_dir}/metrics.csv")
    reached = next((step for step, ret in evals if ret >= task["target"]), None)
    return {"seed": seed, "env_steps_to_target": reached, "final_eval_return": round(evals[-1][1], 1),
            "best_eval_return": round(max(r for _, r in evals), 1), "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(TASKS), default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="SAC update precision")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    quiet_torchrl()  # torchrl logs to stdout: keep it one JSON line
    torch.set_num_threads(args.threads)
    result: dict[str, Any] = {"benchmark": "learning", "torch_threads": args.threads}
    for name, task in TASKS.items():
        if args.only and name != args.only:
            continue
        extra = [f"agent.sac.precision={args.precision}"] if name == "sac" else []
        runs = [run_seed(task, seed, extra) for seed in args.seeds]
        hits = sum(r["env_steps_to_target"] is not None for r in runs)
        result[name] = {
            "env": task["config"], "target_return": task["target"], "budget_env_steps": task["budget"],
            "precision": args.precision if name == "sac" else "fp32", "runs": runs,
            "seeds_reaching_target": f"{hits}/{len(runs)}", "target_met": hits >= task["need"],
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
