"""Collector backends against each other, in one invocation (prints one JSON line).

* ``collection``: env steps per second of the async trainer's collectors, ``thread``, ``process``
  and ``ray`` (a private local Ray) side by side, with 1 and 2 collectors, on two CPU-bound envs:
  ``HalfCheetah-v5`` through the gymnasium adapter, 4 envs per collector (MuJoCo in numpy: the GIL
  serialises collector threads), and a slow env: native Pendulum-v1 x4 whose every step computes
  5 ms in Python (envs.faults ``busy``). Each with a random policy (``agent.learning_starts`` =
  the whole budget: no learner) and with the learner running (SAC, ``--learner-utd`` updates per
  transition). ``env_steps_per_s`` is the steady-state rate: from the first to the last periodic
  metrics row, i.e. those rows' interval rates (their ``env_steps_per_s``) after the first, averaged by
  their seconds, so process start-up (the first interval) and shutdown (the final row) are not in it.
  ``env_steps_per_s_whole_run`` beside it is the final row's whole-run average, both in. Targets on
  HalfCheetah with 2 collectors (steady rates): ``process`` >= 1.6x ``thread``, ``ray`` >= 0.8x ``process``.
* ``threshold`` (``--seeds``): async MBPO on ``configs/pendulum_mbpo.yaml`` with each backend; env steps
  until the 50-episode evaluation (every 200 steps) reaches -200 and stays (benchmarks/sample_efficiency.py).
  Target: the ``process`` and ``ray`` medians within 25% of ``thread``'s.

    python benchmarks/backends.py [--seconds 8] [--seeds 0 1 2] [--only collection threshold]
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

from envs.faults import FaultyFactory
from mbpo.run.logs import quiet_torchrl

BACKENDS = ("thread", "process", "ray")
BUSY_S = 0.005
BATCH = 64
ENVS: dict[str, dict[str, Any]] = {
    # Steps per second of one collector alone decide the budget (--seconds of steady state).
    "HalfCheetah-v5": {"overrides": ["env.id=HalfCheetah-v5", "env.num_envs=4"], "factory": None, "rate": 7000},
    "busy_5ms": {"overrides": ["env.id=Pendulum-v1", "env.num_envs=4"],
                 "factory": FaultyFactory("busy", (0, 1), at_step=1, num_envs=4, options={"delay_s": BUSY_S}),
                 "rate": 4 / BUSY_S},
}


def run(overrides: list[str], config: str | None = None, env_factory: Any = None) -> tuple[dict[str, Any], list]:
    from mbpo.config import load_config
    from mbpo.run.metrics import read_metrics
    from mbpo.trainers import AsyncTrainer

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = load_config(config, ["device=cpu", "progress=false", f"run_dir={run_dir}", "trainer=async",
                                   *overrides])
        row = AsyncTrainer(cfg, run_dir, env_factory=env_factory).run()
        rows = read_metrics(f"{run_dir}/metrics.csv")
    return row, rows


def collection_rate(env: str, backend: str, collectors: int, learner: bool, seconds: float, utd: float) -> dict:
    spec = ENVS[env]
    steps = int(spec["rate"] * collectors * seconds * (0.5 if learner else 1.0)) // 64 * 64
    log_every = steps // 8
    overrides = [*spec["overrides"], f"runtime.backend={backend}", f"runtime.num_collectors={collectors}",
                 f"total_env_steps={steps}", f"log_every={log_every}", f"eval_every={10 * steps}",
                 f"checkpoint.every={10 * steps}", "agent.sac.hidden_sizes=[256,256]", "agent.batch_size=256",
                 f"runtime.collection_batch_size={BATCH}", "runtime.max_queue_size=16",
                 f"agent.learning_starts={1000 if learner else steps}", f"agent.utd_ratio={utd}"]
    row, rows = run(overrides, env_factory=spec["factory"])
    # Periodic rows only: the final one is written after the collectors are joined (a process's exit).
    timed = [(int(r["env_steps"]), float(r["wall_s"])) for r in rows][:-1]
    (s0, w0), (s1, w1) = timed[0], timed[-1]
    return {"env": env, "backend": backend, "collectors": collectors, "learner": learner, "env_steps": steps,
            "env_steps_per_s": round((s1 - s0) / max(w1 - w0, 1e-9)),
            "env_steps_per_s_whole_run": round(row["env_steps_per_s_whole_run"]), "updates": row["updates"],
            "learner_busy": row.get("learner_busy")}


def collection(seconds: float, utd: float) -> dict[str, Any]:
    rows = []
    for env in ENVS:
        for learner in (False, True):
            for collectors in (1, 2):
                for backend in BACKENDS:
                    rows.append(collection_rate(env, backend, collectors, learner, seconds, utd))
                    print(json.dumps(rows[-1]), file=sys.stderr)
    ratios = {}
    for env in ENVS:
        for learner in (False, True):
            for collectors in (1, 2):
                rate = {r["backend"]: r["env_steps_per_s"] for r in rows
                        if (r["env"], r["learner"], r["collectors"]) == (env, learner, collectors)}
                key = f"{env}/{'learner' if learner else 'random'}/{collectors}"
                ratios[key] = {"process_over_thread": round(rate["process"] / rate["thread"], 3),
                               "ray_over_process": round(rate["ray"] / rate["process"], 3)}
    return {"rows": rows, "ratios": ratios, "busy_step_s": BUSY_S, "learner_utd_ratio": utd}


def threshold(seeds: list[int]) -> dict[str, Any]:
    from sample_efficiency import EVAL_EPISODES, EVAL_EVERY, steps_to_threshold

    common = ["total_env_steps=2000", f"eval_every={EVAL_EVERY}", f"eval_episodes={EVAL_EPISODES}",
              "checkpoint.every=2000"]
    out: dict[str, Any] = {}
    for backend in BACKENDS:
        results = []
        for seed in seeds:
            start = time.perf_counter()
            _, rows = run([*common, f"seed={seed}", f"runtime.backend={backend}"], config="configs/pendulum_mbpo.yaml")
            evals = [(int(r["env_steps"]), float(r["eval_return"])) for r in rows if r["eval_return"]]
            wall_s = round(time.perf_counter() - start, 1)
            results.append({"seed": seed, "steps": steps_to_threshold(evals), "wall_s": wall_s})
            print(json.dumps({backend: results[-1]}), file=sys.stderr)
        known = sorted(r["steps"] if r["steps"] is not None else float("inf") for r in results)
        median = statistics.median(known)
        out[backend] = {"runs": results, "median": None if median == float("inf") else median}
    t = out["thread"]["median"]
    for backend in ("process", "ray"):
        if t is not None and out[backend]["median"] is not None:
            out[f"{backend}_over_thread"] = round(out[backend]["median"] / t, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="steady-state seconds per collection row")
    parser.add_argument("--learner-utd", type=float, default=0.002, help="updates per transition with the learner on")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", choices=["collection", "threshold"], default=["collection", "threshold"])
    args = parser.parse_args()
    quiet_torchrl()
    torch.set_num_threads(1)
    result: dict[str, Any] = {"benchmark": "backends", "cpu_count": __import__("os").cpu_count()}
    if "collection" in args.only:
        result["collection"] = collection(args.seconds, args.learner_utd)
    if "threshold" in args.only:
        result["threshold"] = threshold(args.seeds)
    targets = {}
    if "collection" in result:
        ratios = result["collection"]["ratios"]["HalfCheetah-v5/random/2"]
        targets["halfcheetah_process2_at_least_1.6x_thread2"] = ratios["process_over_thread"] >= 1.6
        targets["halfcheetah_ray2_at_least_0.8x_process2"] = ratios["ray_over_process"] >= 0.8
    for backend in ("process", "ray"):
        ratio = result.get("threshold", {}).get(f"{backend}_over_thread")
        if ratio is not None:
            targets[f"threshold_{backend}_within_25pct_of_thread"] = abs(ratio - 1) <= 0.25
    result["targets"] = targets
    print(json.dumps(result))


if __name__ == "__main__":
    main()
