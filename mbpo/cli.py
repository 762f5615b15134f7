"""Command line: ``python -m mbpo <command>``.

Training (``train``/``eval``/``resume``/``plot``) lands with the learners; until
then the only command is ``rollout``, a random-policy rollout that measures env
throughput. It never pretends to train.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

import envs
from mbpo.smoke import random_actions


def rollout(env_id: str, num_envs: int, steps: int, device: str, seed: int) -> dict[str, float | int | str]:
    """Step ``num_envs`` envs with uniform random actions; return throughput and returns."""
    env = envs.make(env_id, num_envs, device=device, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    actions = [random_actions(env, gen) for _ in range(min(steps, 64))]  # sampled off the clock
    env.reset()
    ret = torch.zeros(num_envs, device=env.device)
    finished_sum = torch.zeros((), device=env.device)
    finished = torch.zeros((), dtype=torch.int64, device=env.device)
    start = time.perf_counter()
    for t in range(steps):
        _, reward, terminated, truncated, _ = env.step(actions[t % len(actions)])
        done = terminated | truncated
        ret += reward
        finished_sum += torch.where(done, ret, 0.0).sum()
        finished += done.sum()
        ret.masked_fill_(done, 0.0)
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)
    elapsed = time.perf_counter() - start
    env.close()
    episodes = int(finished)
    return {
        "env_id": env_id,
        "device": str(env.device),
        "num_envs": num_envs,
        "env_steps": steps * num_envs,
        "wall_s": round(elapsed, 3),
        "env_steps_per_s": round(steps * num_envs / elapsed),
        "episodes": episodes,
        "mean_return": round(float(finished_sum) / episodes, 2) if episodes else None,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m mbpo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true",
                        help="debug mode (./run_async.sh --debug also sets CUDA_LAUNCH_BLOCKING=1, TORCH_USE_CUDA_DSA=1)")
    sub = parser.add_subparsers(dest="command")
    ro = sub.add_parser("rollout", help="random-policy rollout of a vectorized env; prints its throughput")
    ro.add_argument("--env", default="Pendulum-v1", help="env id (default: Pendulum-v1)")
    ro.add_argument("--num-envs", type=int, default=4096, help="envs stepped together (default: 4096)")
    ro.add_argument("--steps", type=int, default=1000, help="vector steps (default: 1000)")
    ro.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    ro.add_argument("--seed", type=int, default=0)
    # Until training lands the default command is the random rollout.
    known = {"rollout", "-h", "--help"}
    if not any(a in known for a in argv):
        argv = [a for a in argv if a == "--debug"] + ["rollout"] + [a for a in argv if a != "--debug"]
    args = parser.parse_args(argv)
    if args.debug or os.environ.get("MBPO_DEBUG") == "1":
        switches = {k: os.environ.get(k, "unset") for k in ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA")}
        print(f"[mbpo] debug mode: {switches}", file=sys.stderr)
    print("[mbpo] training is not implemented yet: this is a RANDOM-POLICY rollout measuring env throughput",
          file=sys.stderr)
    result = rollout(args.env, args.num_envs, args.steps, args.device, args.seed)
    print(json.dumps(result))
    return 0
