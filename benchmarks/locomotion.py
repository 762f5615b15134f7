"""MuJoCo Hopper-v5: MBPO-SAC against SAC at the same 20 updates per step and Stable-Baselines3 SAC.

One invocation runs (or picks up) every learner and seed on this machine, prints one JSON line and draws
one learning-curve PNG (median and range over seeds, through ``mbpo plot``'s :func:`mbpo.plotting.plot_runs`).
Every learner is evaluated every 2,500 env steps on 10 deterministic episodes:

* ``mbpo``: ``configs/hopper_mbpo.yaml`` (the MBPO paper's Hopper constants; async trainer);
* ``sac_same_ratio``: the same config with ``model.enabled=false`` (20 updates per real step, no model);
* ``sb3``: Stable-Baselines3 SAC with rl-zoo's Hopper hyperparameters (``hyperparams/sac.yml``, mujoco
  defaults: ``learning_starts`` 10,000, SB3's defaults otherwise: 256x256, lr 3e-4, batch 256, 1 update
  per step, automatic entropy).

Runs take hours on a 2-core CPU, so each (learner, seed) has its own run dir under ``--run-root`` (keep it
outside the checkout): a finished run is read, not rerun; an interrupted one of ours is resumed from its
newest checkpoint (an SB3 run, minutes long, is rerun). Targets: MBPO's median return at 30k env steps
>= 1.5x same-ratio SAC's and >= 2x SB3's.

    python benchmarks/locomotion.py [--seeds 0 1 2] [--run-root ~/mbpo-runs/locomotion] [--precision fp32|bf16]
                                    [--only mbpo sac_same_ratio sb3] [--jobs 1] [--report-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG = "configs/hopper_mbpo.yaml"
ENV_ID = "Hopper-v5"
STEPS = 30_000
EVAL_EVERY, EVAL_EPISODES = 2_500, 10
REPORT_AT = (10_000, 20_000, 30_000)
LEARNERS = ("mbpo", "sac_same_ratio", "sb3")
LABELS = {"mbpo": "MBPO-SAC (ours, utd 20)", "sac_same_ratio": "SAC (ours, utd 20, no model)",
          "sb3": "SB3 SAC (rl-zoo, utd 1)"}


def run_dir_of(root: Path, learner: str, seed: int, precision: str) -> Path:
    suffix = "" if learner == "sb3" or precision == "fp32" else f"-{precision}"
    return root / f"{learner}{suffix}-s{seed}"


def run_ours(learner: str, seed: int, run_dir: Path, precision: str) -> None:
    """Train, or resume an interrupted run; a finished run is left as it is."""
    from mbpo.checkpoint import list_checkpoints
    from mbpo.config import load_config
    from mbpo.trainers import RunAlreadyDone, make_trainer, resume_trainer

    if list_checkpoints(run_dir / "checkpoints"):
        try:
            trainer = resume_trainer(run_dir, [f"total_env_steps={STEPS}"])
        except RunAlreadyDone:
            return
    else:
        overrides = [f"run_dir={run_dir}", f"seed={seed}", f"total_env_steps={STEPS}", f"eval_every={EVAL_EVERY}",
                     f"eval_episodes={EVAL_EPISODES}", "progress=false", f"agent.sac.precision={precision}"]
        if learner == "sac_same_ratio":
            overrides.append("model.enabled=false")
        trainer = make_trainer(load_config(CONFIG, overrides), run_dir)
    trainer.run()
    if getattr(trainer, "exit_code", 0):  # Ctrl-C or SIGTERM: the run is checkpointed; stop here, resume later
        raise SystemExit(trainer.exit_code)


def run_sb3(seed: int, run_dir: Path) -> None:
    """SB3 SAC, evaluated on the same cadence; writes metrics.csv and a run.json that names the curve."""
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    from mbpo.metrics import MetricsLogger

    if (run_dir / "run.json").is_file() and json.loads((run_dir / "run.json").read_text()).get("done"):
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(run_dir, STEPS, progress=False)
    eval_env = gym.make(ENV_ID)
    start = time.perf_counter()

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                returns, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
                logger.log({"env_steps": self.num_timesteps, "updates": self.model._n_updates,
                            "wall_s": round(time.perf_counter() - start, 3), "eval_return": float(returns)})
            return True

    model = SAC("MlpPolicy", gym.make(ENV_ID), learning_starts=10_000, seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=STEPS, callback=Evaluate())
    logger.close()
    (run_dir / "run.json").write_text(json.dumps({"label": LABELS["sb3"], "seed": seed, "done": True}))


def summarize(learner: str, run_dirs: list[Path]) -> dict[str, Any]:
    from mbpo.metrics import read_metrics
    from mbpo.throughput import steady_rate

    runs = []
    for run_dir in run_dirs:
        if not (run_dir / "metrics.csv").is_file():
            continue
        rows = read_metrics(run_dir / "metrics.csv")
        evals = {int(r["env_steps"]): float(r["eval_return"]) for r in rows if r.get("eval_return")}
        last = rows[-1]
        runs.append({
            "run_dir": str(run_dir), "env_steps": int(last["env_steps"]), "wall_s": float(last["wall_s"]),
            "returns": {str(k): round(evals[k], 1) for k in REPORT_AT if k in evals},
            # Steady state (no start-up: mbpo.throughput.steady_rate) and the whole run's average beside it.
            "env_steps_per_s": _round(steady_rate(rows)),
            "env_steps_per_s_whole_run": _round(int(last["env_steps"]) / max(float(last["wall_s"]), 1e-9)),
            "learner_busy": _median(rows, "learner_busy"), "model_busy": _median(rows, "model_busy"),
        })
    out: dict[str, Any] = {"label": LABELS[learner], "runs": runs}
    for k in REPORT_AT:
        values = [r["returns"][str(k)] for r in runs if str(k) in r["returns"]]
        out[f"median_at_{k}"] = round(statistics.median(values), 1) if values else None
    out["seeds_done"] = sum(r["env_steps"] >= STEPS for r in runs)
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _median(rows: list[dict[str, str]], column: str) -> float | None:
    """The median of a per-interval column over the rows after the first (whose interval holds the start-up)."""
    values = [float(r[column]) for r in rows[1:] if r.get(column)]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--run-root", type=Path, default=Path.home() / "mbpo-runs" / "locomotion")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="our learners' SAC update")
    parser.add_argument("--only", nargs="+", choices=LEARNERS, default=list(LEARNERS))
    parser.add_argument("--report-only", action="store_true", help="summarize and plot what the run root holds")
    args = parser.parse_args()
    from mbpo.logs import quiet_torchrl
    from mbpo.plotting import plot_runs

    quiet_torchrl()
    root = args.run_root.expanduser()
    root.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for seed in args.seeds:  # seed-major, so an interrupted invocation has every learner at some seeds
            for learner in args.only:
                run_dir = run_dir_of(root, learner, seed, args.precision)
                print(f"[locomotion] {learner} seed {seed}: {run_dir}", file=sys.stderr)
                if learner == "sb3":
                    run_sb3(seed, run_dir)
                else:
                    run_ours(learner, seed, run_dir, args.precision)
    result: dict[str, Any] = {"benchmark": "locomotion", "env": ENV_ID, "env_steps": STEPS, "eval_every": EVAL_EVERY,
                              "eval_episodes": EVAL_EPISODES, "precision": args.precision, "seeds": args.seeds,
                              "learners": {}}
    dirs = {learner: [run_dir_of(root, learner, s, args.precision) for s in args.seeds] for learner in LEARNERS}
    for learner in LEARNERS:
        result["learners"][learner] = summarize(learner, dirs[learner])
    existing = [d for learner in LEARNERS for d in dirs[learner] if (d / "metrics.csv").is_file()]
    if existing:
        png = plot_runs(existing, root / f"hopper_learning_curves_{args.precision}.png",
                        title=f"{ENV_ID}: evaluation return (10 episodes), median and range over seeds")
        result["plot"] = str(png)
    mbpo = result["learners"]["mbpo"][f"median_at_{STEPS}"]
    targets = {}
    for peer, factor in (("sac_same_ratio", 1.5), ("sb3", 2.0)):
        value = result["learners"][peer][f"median_at_{STEPS}"]
        if mbpo is not None and value is not None:
            result[f"mbpo_over_{peer}"] = round(mbpo / value, 3) if value else None
            targets[f"mbpo_at_least_{factor}x_{peer}"] = mbpo >= factor * value
    result["targets"] = targets
    print(json.dumps(result))


if __name__ == "__main__":
    main()
