"""Env steps per second of the native torch envs against gymnasium, in one run.

Prints one JSON line, with the host's CPU flags. Ours: native Pendulum-v1 and
CartPole-v1 at 1 to 65,536 envs (eager, and compiled at 4,096 where a compiler
exists, with the seconds the first compiled step took). Peers, measured in the
same run and interleaved with ours so machine noise hits both alike:
gymnasium's SyncVectorEnv Pendulum-v1 at 64 envs and gymnasium's own
numpy-vectorized CartPole-v1 at 4,096 envs. Ratios are medians over repeats.

    python benchmarks/env_throughput.py [--repeats 5] [--min-time 0.3] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

import envs
from mbpo.run.provenance import machine

COUNTS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536]
CUDA_COUNTS = [4096, 65536, 1_048_576]
"""On a GPU: the sizes a GPU simulator runs, up to 1M envs (small counts are launch-bound and say nothing new)."""


def steps_per_s(step: Callable[[], object], num_envs: int, min_time: float) -> float:
    """Env steps per second of ``step`` (one vector step of ``num_envs``), after warm-up."""
    for _ in range(10):
        step()
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < min_time:
        for _ in range(10):
            step()
        n += 10
    return n * num_envs / elapsed


def native_stepper(env_id: str, num_envs: int, device: str, compile: bool = False) -> Callable[[], object]:
    env = envs.make(env_id, num_envs, device=device, seed=0, compile=compile)
    env.reset()
    g = torch.Generator().manual_seed(0)
    if env.is_discrete:
        actions = torch.randint(0, env.act_dim, (num_envs,), generator=g)
    else:
        actions = torch.rand(num_envs, env.act_dim, generator=g) * 4 - 2
    actions = actions.to(env.device)
    if env.device.type == "cuda":
        return lambda: (env.step(actions), torch.cuda.synchronize())
    return lambda: env.step(actions)


def gym_stepper(env_id: str, num_envs: int, mode: str) -> Callable[[], object]:
    venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode)
    venv.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = np.stack([venv.single_action_space.sample() for _ in range(num_envs)])
    if isinstance(venv.single_action_space, gym.spaces.Box):
        actions = rng.uniform(-2, 2, actions.shape).astype(np.float32)
    return lambda: venv.step(actions)


def eager_pairs(device: str) -> dict[str, tuple[Callable[[], object], int, Callable[[], object], int]]:
    """The two head-to-head pairs the targets are about: (ours, its envs, peer, its envs) by name."""
    return {
        "pendulum_4096_vs_gym_sync_64": (
            native_stepper("Pendulum-v1", 4096, device), 4096, gym_stepper("Pendulum-v1", 64, "sync"), 64
        ),
        "cartpole_4096_vs_gym_numpy_4096": (
            native_stepper("CartPole-v1", 4096, device), 4096,
            gym_stepper("CartPole-v1", 4096, "vector_entry_point"), 4096,
        ),
    }


def head_to_head(ours: Callable[[], object], n_ours: int, peer: Callable[[], object], n_peer: int, repeats: int,
                 min_time: float) -> dict[str, float]:
    """Ours and the peer measured in turn, ``repeats`` times; medians of each rate and of the ratios."""
    rates = [(steps_per_s(ours, n_ours, min_time), steps_per_s(peer, n_peer, min_time)) for _ in range(repeats)]
    return {
        "ours_steps_per_s": round(statistics.median(r[0] for r in rates)),
        "peer_steps_per_s": round(statistics.median(r[1] for r in rates)),
        "ratio": round(statistics.median(r[0] / r[1] for r in rates), 2),
    }


def median_rate(make: Callable[[], Callable[[], object]], num_envs: int, repeats: int, min_time: float) -> float:
    step = make()
    return statistics.median(steps_per_s(step, num_envs, min_time) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds per measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--device", default="cpu", help="device of the native envs")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd variants")
    parser.add_argument("--counts", type=int, nargs="+", default=None,
                        help=f"env counts (default: {COUNTS} on cpu, {CUDA_COUNTS} on cuda)")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    counts = args.counts or (CUDA_COUNTS if cuda else COUNTS)
    torch.set_num_threads(args.threads)

    host = machine()
    result: dict[str, object] = {
        "benchmark": "env_throughput",
        "device": args.device,
        "torch_threads": args.threads,
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "cpu": host["cpu"],
        "cpu_flags": host["cpu_flags"],  # the CartPole ratio differs between host kinds (AMX or not)
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device_name": torch.cuda.get_device_name(args.device) if cuda else None,
    }
    native: dict[str, dict[str, float]] = {}
    for env_id in ("Pendulum-v1", "CartPole-v1"):
        native[env_id] = {
            str(n): round(median_rate(functools.partial(native_stepper, env_id, n, args.device), n, 3, args.min_time))
            for n in counts
        }
    result["native_steps_per_s"] = native
    compiled_top: dict[str, dict[str, float]] = {}
    if cuda and not args.no_compile:  # where a GPU pays: the compiled step at the largest count
        top = max(counts)
        compiled_top = {
            env_id: {str(top): round(median_rate(
                functools.partial(native_stepper, env_id, top, args.device, True), top, 3, args.min_time))}
            for env_id in ("Pendulum-v1", "CartPole-v1")
        }
        result["compiled_steps_per_s"] = compiled_top

    # Head-to-head pairs, interleaved repeat by repeat.
    pairs = eager_pairs(args.device)
    compiler = shutil.which("g++") or shutil.which("cc")
    if not args.no_compile and (compiler or args.device.startswith("cuda")):
        compiled, compile_s = {}, {}
        for env_id in ("CartPole-v1", "Pendulum-v1"):
            start = time.perf_counter()
            compiled[env_id] = native_stepper(env_id, 4096, args.device, compile=True)
            compiled[env_id]()  # the first step compiles (inductor's on-disk cache, warm or cold, as it is)
            compile_s[env_id] = round(time.perf_counter() - start, 1)
        result["compile_s_at_4096"] = compile_s
        pairs["cartpole_compiled_4096_vs_gym_numpy_4096"] = (
            compiled["CartPole-v1"], 4096, pairs["cartpole_4096_vs_gym_numpy_4096"][2], 4096,
        )
        pairs["pendulum_compiled_4096_vs_gym_sync_64"] = (
            compiled["Pendulum-v1"], 4096, pairs["pendulum_4096_vs_gym_sync_64"][2], 64,
        )
    pairs_measured = {name: head_to_head(*pair, args.repeats, args.min_time) for name, pair in pairs.items()}
    result["head_to_head"] = pairs_measured
    targets = {
        "pendulum_4096_at_least_300x_sync_64": pairs_measured["pendulum_4096_vs_gym_sync_64"]["ratio"] >= 300,
        "cartpole_4096_at_least_1x_numpy_4096": max(
            v["ratio"] for k, v in pairs_measured.items() if k.startswith("cartpole")
        ) >= 1.0,
    }
    if cuda:
        pendulum = [*native["Pendulum-v1"].values(), *compiled_top.get("Pendulum-v1", {}).values()]
        targets["pendulum_at_least_100M_steps_per_s_on_gpu"] = max(pendulum) >= 1e8
    result["targets"] = targets
    print(json.dumps(result))


if __name__ == "__main__":
    main()
