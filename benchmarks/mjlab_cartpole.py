"""Async MBPO-SAC against the project's SAC on mjlab's Mjlab-Cartpole-Balance (CPU by default).

Threshold: a mean eval return (16 deterministic 1,000-step episodes) of 45. The reward is
dm_control's smooth balance reward scaled by dt, at most 0.05 per step, so 50 is the maximum;
holding the action at 0 scores about 30 (the pole starts near upright and falls over slowly) and
random actions about 10, while a hand-written balancing controller scores 50.0 in every env. 45
(90% of the maximum, well above "doing nothing") is reached only by a policy that keeps the pole up.

Both learners run at once, one process each, from ``configs/mjlab_cartpole_mbpo.yaml`` (async
trainer); SAC is the same config with ``model.enabled=false agent.utd_ratio=1`` and twice the
env steps. Prints one JSON line: env steps and wall-clock seconds at the first evaluation at or
above the threshold, and the curves. ``--num-envs 4096 --device cuda`` for a GPU machine.

    python benchmarks/mjlab_cartpole.py [--minutes 40] [--num-envs 16] [--device cpu] [--seed 0]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 45.0
VARIANTS = {"mbpo": [], "sac": ["model.enabled=false", "agent.utd_ratio=1", "total_env_steps=40000"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=40.0)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        procs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "mbpo", "train", "--config", str(ROOT / "configs/mjlab_cartpole_mbpo.yaml"),
                 f"run_dir={tmp}/{name}", f"seed={args.seed}", f"device={args.device}", "progress=false",
                 f"env.num_envs={args.num_envs}", *overrides],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, overrides in VARIANTS.items()
        }
        deadline = start + 60 * args.minutes
        for p in procs.values():
            try:
                p.wait(timeout=max(deadline - time.perf_counter(), 1))
            except subprocess.TimeoutExpired:
                p.terminate()  # SIGTERM: the async trainer drains, checkpoints and exits 143
                p.wait()
        result = {"benchmark": "mjlab_cartpole", "env": "Mjlab-Cartpole-Balance", "device": args.device,
                  "num_envs": args.num_envs, "threshold": THRESHOLD, "seed": args.seed,
                  "wall_s": round(time.perf_counter() - start, 1)}
        for name in VARIANTS:
            with open(f"{tmp}/{name}/metrics.csv") as f:
                rows = [r for r in csv.DictReader(f) if r["eval_return"]]
            curve = [(int(r["env_steps"]), round(float(r["eval_return"]), 2), round(float(r["wall_s"]))) for r in rows]
            hit = next(((s, w) for s, ret, w in curve if ret >= THRESHOLD), None)
            result[name] = {"env_steps_to_threshold": hit[0] if hit else None,
                            "wall_s_to_threshold": hit[1] if hit else None,
                            "env_steps": curve[-1][0] if curve else 0, "curve_env_steps_return_wall_s": curve}
        print(json.dumps(result))


if __name__ == "__main__":
    main()
