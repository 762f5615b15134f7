"""MuJoCo Hopper-v5 and Walker2d-v5: MBPO-SAC against SAC at the same 20 updates per step and Stable-Baselines3 SAC.

One invocation runs (or picks up) every requested learner and seed on this machine, prints one JSON line and
draws the learning curves (median and range over seeds, through ``mbpo plot``'s :func:`mbpo.run.plotting.plot_runs`)
and the MBPO runs' model-health chart. Every learner is evaluated every 2,500 env steps on 10 deterministic
episodes; env steps count the 5,000 random steps, as the MBPO authors' own curves do (their x runs 6,019,
7,019, ...: jannerm/mbpo's ``sampler/total-samples``), which are drawn beside ours from
docs/results/locomotion/mbpo_paper.json (gym -v2, MuJoCo 1.50).

* ``mbpo``: ``configs/<env>_mbpo.yaml`` (the MBPO paper's constants; async trainer);
* ``sac_same_ratio``: the same config with ``model.enabled=false`` (20 updates per real step, no model);
* ``sb3``: Stable-Baselines3 SAC with rl-zoo's settings (``hyperparams/sac.yml``, mujoco defaults:
  ``learning_starts`` 10,000, SB3's defaults otherwise: 256x256, lr 3e-4, batch 256, 1 update per step,
  automatic entropy);
* ``mbpo_sync``: ``mbpo`` with ``trainer=sync`` (the paper's MBPO is synchronous): the async trainer's cost;
* ``mbpo_lead0``: ``mbpo`` with ``runtime.max_lead=0``, the collectors' lead bounded only by
  ``runtime.ratio_tolerance`` (10% of the run), as before ``runtime.max_lead`` existed.

Runs take hours on a 2-core CPU, so each (env, learner, seed) has its own run dir under ``--run-root`` (keep it
outside the checkout): a finished run is read, not rerun; an interrupted one of ours is resumed from its newest
checkpoint (an SB3 run, minutes long, is rerun). ``--results DIR`` copies every finished run's config.yaml,
metrics.csv and run.json there (docs/results/locomotion in the repository), and ``--report-only --run-root
DIR --charts docs/img`` rebuilds the JSON line and docs/benchmarks.md's charts from such a copy. Targets, on the
median score of ``--best-mbpo``: at least 1,850 on Hopper (REDQ's published mean) and 700 on Walker2d, and at
least every model-free learner's.

    python benchmarks/locomotion.py [--env hopper|walker2d] [--seeds 0 1 2] [--learners mbpo sac_same_ratio sb3]
                                    [--run-root ~/mbpo-runs/locomotion] [--results docs/results/locomotion]
                                    [--report-only] [--charts docs/img]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from mbpo.run.plotting import Run

ENVS = {"hopper": "Hopper-v5", "walker2d": "Walker2d-v5"}
STEPS = 30_000
RANDOM_STEPS = 5_000  # agent.learning_starts of both configs
EVAL_EVERY, EVAL_EPISODES = 2_500, 10
CHECKPOINT_EVERY = 500
"""A run cut off hard (a machine taken back: no signal, no final checkpoint) redoes at most this many env
steps, about 4 minutes of a Hopper run here; a checkpoint (about 60 MB at 30k) takes about a second."""
REPORT_AT = (10_000, 20_000, 30_000)
LAST_EVALS = 3
"""Each seed's score: the mean of the last three evaluations (25k, 27.5k, 30k); one 10-episode Hopper evaluation
swings by hundreds from its neighbours, close to a single draw."""
MODEL_FREE = ("sac_same_ratio", "sb3", "redq", "droq", "crossq")
"""The learners without a model, each of which the best MBPO must match (issue 37's target)."""
BEST_MBPO = "mbpo_redq"
"""MBPO with the critic option the Hopper screen picked (docs/benchmarks.md, "Critic options")."""
SCORE_TARGETS = {"hopper": 1_850.0, "walker2d": 700.0}
"""The best MBPO's median score to reach: REDQ's published Hopper mean at 33k, and 700 on Walker2d."""
PUBLISHED_FILE = ROOT / "docs" / "results" / "locomotion" / "published.json"
"""REDQ, DroQ, CrossQ and SAC as published (benchmarks/published_curves.py): drawn beside ours."""
CONFIGS: dict[str, tuple[str, list[str]]] = {
    "mbpo": ("mbpo", []), "sac_same_ratio": ("mbpo", ["model.enabled=false"]), "mbpo_sync": ("mbpo", ["trainer=sync"]),
    "mbpo_lead0": ("mbpo", ["runtime.max_lead=0"]), "mbpo_redq": ("mbpo_redq", []), "mbpo_droq": ("mbpo_droq", []),
    "redq": ("redq", []), "droq": ("droq", []), "crossq": ("crossq", []),
    "mbpo_redq_masked": ("mbpo_redq_masked", []),
    "mbpo_redq_real_half": ("mbpo_redq", ["model.real_ratio=0.5"]),  # half of each batch real (Walker2d screen)
    # issue 50's ideas, each on MBPO-REDQ (screens: 15k env steps, seeds 0 and 1)
    "mbpo_redq_nstep3": ("mbpo_redq", ["model.rollout_schedule=[0,1,3,3]", "model.rollout_n_step=3"]),
    "mbpo_redq_macura": ("mbpo_redq", ["model.macura=true", "model.rollout_schedule=[0,0,10,10]"]),
    "mbpo_redq_resets": ("mbpo_redq", ["agent.sac.reset_every=100000"]),  # every 5,000 env steps at utd 20
}
"""Our learners: ``configs/<env>_<stem>.yaml`` and the overrides on it."""
LEARNERS = (*CONFIGS, "sb3")
LABELS = {"mbpo": "MBPO-SAC (ours, utd 20)", "sac_same_ratio": "SAC (ours, utd 20, no model)",
          "sb3": "SB3 SAC (rl-zoo, utd 1)", "mbpo_sync": "MBPO-SAC (ours, utd 20, sync trainer)",
          "mbpo_lead0": "MBPO-SAC (ours, utd 20, lead not capped)",
          "mbpo_redq": "MBPO with REDQ's critic (ours, utd 20)", "mbpo_droq": "MBPO with DroQ's critic (ours, utd 20)",
          "redq": "REDQ (ours, utd 20, no model)", "droq": "DroQ (ours, utd 20, no model)",
          "crossq": "CrossQ (ours, utd 1, no model)",
          "mbpo_redq_masked": "MBPO with REDQ's critic, M2AC's masking at 0.5 (ours, utd 20)",
          "mbpo_redq_real_half": "MBPO with REDQ's critic, real_ratio 0.5 (ours, utd 20)",
          "mbpo_redq_nstep3": "MBPO with REDQ's critic, 3-step model rows on 3-step branches (ours, utd 20)",
          "mbpo_redq_macura": "MBPO with REDQ's critic, MACURA's rollouts up to 10 steps (ours, utd 20)",
          "mbpo_redq_resets": "MBPO with REDQ's critic, networks reset every 100,000 updates (ours, utd 20)"}
KEPT = ("config.yaml", "metrics.csv", "run.json", "resumes.yaml")
"""What --results keeps of a finished run (small text files; no checkpoints)."""
PAPER_FILE = ROOT / "docs" / "results" / "locomotion" / "mbpo_paper.json"
"""The MBPO paper's curves, where known: ``{env_id: {"source": ..., "env_steps": [...], "return": [...],
"std": [...]}}``; env steps count the random ones, as ours do."""
HEALTH = ("model_err_delta", "model_err_reward", "model_open_loop_err_1", "model_open_loop_err_5",
          "model_err_termination", "real_termination_rate", "rollout_termination_rate", "rollout_nonfinite_frac",
          "rollout_mean_length", "q_bias", "model_fits_capped", "model_members_below_pre_fit", "model_trainings",
          "model_fit_epochs")


def machine() -> dict[str, Any]:
    """What a figure was measured on: CPU model and the flags that decide precision, cores, torch."""
    import torch

    from mbpo.run.provenance import machine as this_machine

    return {**this_machine(), "torch": torch.__version__}


def run_dir_of(root: Path, env: str, learner: str, seed: int) -> Path:
    return root / env / f"{learner}-s{seed}"


def run_ours(env: str, learner: str, seed: int, run_dir: Path, steps: int = STEPS) -> None:
    """Train, or resume an interrupted run; a finished run is left as it is."""
    from mbpo.config import load_config
    from mbpo.run.checkpoint import list_checkpoints
    from mbpo.trainers import RunAlreadyDone, make_trainer, resume_trainer

    if _done(run_dir):
        return
    start = time.perf_counter()
    if list_checkpoints(run_dir / "checkpoints"):
        try:
            trainer = resume_trainer(run_dir, [f"total_env_steps={steps}", f"checkpoint.every={CHECKPOINT_EVERY}"])
        except RunAlreadyDone:
            trainer = None
    else:
        stem, learner_overrides = CONFIGS[learner]
        overrides = [f"run_dir={run_dir}", f"seed={seed}", f"total_env_steps={steps}", f"eval_every={EVAL_EVERY}",
                     f"eval_episodes={EVAL_EPISODES}", f"checkpoint.every={CHECKPOINT_EVERY}", "progress=false",
                     *learner_overrides]
        trainer = make_trainer(load_config(ROOT / "configs" / f"{env}_{stem}.yaml", overrides), run_dir)
    if trainer is not None:
        trainer.run()
        if getattr(trainer, "exit_code", 0):  # Ctrl-C or SIGTERM: the run is checkpointed; stop here, resume later
            raise SystemExit(trainer.exit_code)
    _write_run_json(run_dir, learner, seed, time.perf_counter() - start)


def run_sb3(env: str, seed: int, run_dir: Path) -> None:
    """SB3 SAC, evaluated on the same cadence; writes metrics.csv and a run.json that names the curve."""
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    from mbpo.config.seeding import derive
    from mbpo.run.metrics import MetricsLogger

    if _done(run_dir):
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(run_dir, STEPS, progress=False)
    eval_env = DummyVecEnv([lambda: gym.make(ENVS[env])])
    start, cpu_start = time.perf_counter(), time.process_time()

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY == 0:
                eval_env.seed(derive(seed, "sb3_eval", self.num_timesteps))  # each evaluation reproducible alone
                returns, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True,
                                             warn=False)
                logger.log({"env_steps": self.num_timesteps, "updates": self.model._n_updates,
                            "wall_s": round(time.perf_counter() - start, 3),
                            "cpu_s": round(time.process_time() - cpu_start, 3), "eval_return": float(returns)})
            return True

    model = SAC("MlpPolicy", gym.make(ENVS[env]), learning_starts=10_000, seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=STEPS, callback=Evaluate())
    logger.close()
    _write_run_json(run_dir, "sb3", seed, time.perf_counter() - start)


def _write_run_json(run_dir: Path, learner: str, seed: int, seconds: float) -> None:
    """Mark a finished run in its run.json, keeping what the trainer recorded there (identity, provenance);
    an SB3 run, which has no trainer of ours, records its own provenance with SB3's version.
    """
    from mbpo.run.provenance import provenance

    path = run_dir / "run.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        info = {}
    if learner == "sb3":
        info["provenance"] = [provenance(0, extra_packages=("stable_baselines3",))]
    info |= {"label": LABELS[learner], "learner": learner, "seed": seed, "done": True,
             "wall_s_this_invocation": round(seconds, 1), "machine": machine()}
    path.write_text(json.dumps(info, indent=1) + "\n")


def _done(run_dir: Path) -> bool:
    try:
        return bool(json.loads((run_dir / "run.json").read_text()).get("done"))
    except (OSError, ValueError):
        return False


def export(run_dir: Path, dest: Path) -> None:
    """Copy a finished run's small text files (no checkpoints) to ``dest`` (for the repository)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, dest / name)


def returns_at(evals: dict[int, float]) -> dict[str, float]:
    """The evaluation nearest each of REPORT_AT, within half an eval interval: the async trainer logs after
    whole collection batches, so its evaluations fall a few dozen steps past the milestone (10,048).
    """
    out = {}
    for k in REPORT_AT:
        near = [s for s in evals if abs(s - k) <= EVAL_EVERY // 2]
        if near:
            out[str(k)] = round(evals[min(near, key=lambda s: abs(s - k))], 1)
    return out


def last_evals_mean(evals: dict[int, float]) -> float | None:
    """The mean of the last LAST_EVALS evaluations, or None before the run has that many."""
    if len(evals) < LAST_EVALS:
        return None
    return round(statistics.fmean(evals[s] for s in sorted(evals)[-LAST_EVALS:]), 1)


def summarize(learner: str, run_dirs: list[Path]) -> dict[str, Any]:
    """A learner's figures over its run dirs that have evaluations; a seed not run (no dir) is left out, and
    a run not evaluated yet or unreadable is left out with a note on stderr naming it and why.
    """
    from mbpo.run.metrics import note_passed_over, read_runs
    from mbpo.run.throughput import steady_rate

    read, passed = read_runs([d for d in run_dirs if d.is_dir()])
    note_passed_over("[locomotion]", passed)
    runs = []
    for run_dir, rows in read.items():
        evals = {int(r["env_steps"]): float(r["eval_return"]) for r in rows if r.get("eval_return")}
        last = rows[-1]
        run: dict[str, Any] = {
            "run_dir": str(run_dir), "env_steps": int(last["env_steps"]), "wall_s": float(last["wall_s"]),
            "cpu_s": _float(last.get("cpu_s")),  # None for runs logged before metrics.csv had it
            "done": _done(run_dir), "returns": returns_at(evals),
            "score": last_evals_mean(evals), "cpu_flags": _cpu_flags(run_dir),
            # steady state (no start-up: mbpo.run.throughput.steady_rate) and the whole run's average beside it
            "env_steps_per_s": _round(steady_rate(rows)),
            "env_steps_per_s_whole_run": _round(int(last["env_steps"]) / max(float(last["wall_s"]), 1e-9)),
            "learner_busy": _median(rows, "learner_busy"), "model_busy": _median(rows, "model_busy"),
        }
        health = {k: _float(last.get(k)) for k in HEALTH if _float(last.get(k)) is not None}
        if health:
            run["last_row"] = {k: round(v, 4) for k, v in health.items()}
        runs.append(run)
    out: dict[str, Any] = {"label": LABELS[learner], "runs": runs}
    for k in REPORT_AT:
        values = [r["returns"][str(k)] for r in runs if str(k) in r["returns"]]
        out[f"median_at_{k}"] = round(statistics.median(values), 1) if values else None
        out[f"range_at_{k}"] = [min(values), max(values)] if values else None
    scores = [r["score"] for r in runs if r["done"] and r["score"] is not None]
    out["median_score"] = round(statistics.median(scores), 1) if scores else None
    out["score_range"] = [min(scores), max(scores)] if scores else None
    walls = [r["wall_s"] for r in runs if r["done"]]
    out["median_wall_s"] = round(statistics.median(walls), 1) if walls else None
    cpus = [r["cpu_s"] for r in runs if r["done"]]
    known = [c for c in cpus if c is not None]
    out["median_cpu_s"] = round(statistics.median(known), 1) if known and len(known) == len(cpus) else None
    out["seeds_done"] = sum(r["done"] for r in runs)
    return out


def _cpu_flags(run_dir: Path) -> list[str] | None:
    """The CPU flags run.json recorded for the run (its provenance, else the benchmark's machine record)."""
    try:
        info = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return None
    records = info.get("provenance") or []
    flags = {f for r in records for f in r.get("machine", {}).get("cpu_flags", [])}
    return sorted(flags) if flags else info.get("machine", {}).get("cpu_flags")


def paper_curve(env_id: str) -> dict[str, Any] | None:
    """The paper's curve for ``env_id``, if docs/results has it."""
    if not PAPER_FILE.is_file():
        return None
    curve: dict[str, Any] | None = json.loads(PAPER_FILE.read_text()).get(env_id)
    return curve


def paper_at(curve: dict[str, Any], env_steps: int) -> tuple[int, float, float] | None:
    """The paper's point nearest ``env_steps`` (its evaluations fall 19 steps after each thousand)."""
    near = min(range(len(curve["env_steps"])), key=lambda i: abs(curve["env_steps"][i] - env_steps))
    if abs(curve["env_steps"][near] - env_steps) > 500:
        return None
    return curve["env_steps"][near], curve["return"][near], curve["std"][near]


def published_curves(env_id: str) -> dict[str, Any]:
    """The published model-free curves for ``env_id`` (docs/results/locomotion/published.json), if any."""
    if not PUBLISHED_FILE.is_file():
        return {}
    found: dict[str, Any] = json.loads(PUBLISHED_FILE.read_text()).get(env_id, {})
    return found


def draw(env: str, runs: list[Run], out: Path, paper: dict[str, Any] | None,
         published: dict[str, Any] | None = None) -> Path:
    from mbpo.run.plotting import _pyplot, curves

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.4))
    for label, c in curves(runs).items():
        k = len(c["seeds"])
        line, = ax.plot(c["x"], c["median"], "o-", ms=3, label=f"{label} ({k} seed{'s' if k > 1 else ''})")
        if k > 1:
            ax.fill_between(c["x"], c["low"], c["high"], color=line.get_color(), alpha=0.2)
    if paper is not None:
        keep = [i for i, x in enumerate(paper["env_steps"]) if x <= STEPS + 2_000]
        x, y, sd = ([paper[k][i] for i in keep] for k in ("env_steps", "return", "std"))
        ax.plot(x, y, "k--", lw=1.2, label=f"MBPO paper ({paper['source_short']}), mean and std")
        ax.fill_between(x, [a - b for a, b in zip(y, sd, strict=True)], [a + b for a, b in zip(y, sd, strict=True)],
                        color="k", alpha=0.08)
    for curve in (published or {}).values():
        keep = [i for i, x in enumerate(curve["env_steps"]) if x <= STEPS + 4_000]
        ax.plot([curve["env_steps"][i] for i in keep], [curve["mean"][i] for i in keep], ":", marker="x", ms=4,
                lw=1.0, label=f"{curve['label']}, mean of {max(curve['seeds'])} seeds")
    ax.axvline(RANDOM_STEPS, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("env steps (including the 5,000 random ones)")
    ax.set_ylabel("evaluation return (10 episodes)")
    ax.set_title(f"{ENVS[env]}: median and range over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def report(env: str, root: Path, seeds: list[int], best: str = BEST_MBPO,
           charts: Path | None = None) -> dict[str, Any]:
    """The JSON line: every learner's runs and median score, the compute cost of each against today's MBPO, the
    published curves' figures at 30k, the targets; and the charts, drawn into ``charts`` (the run root by
    default; docs/img for the ones docs/benchmarks.md shows, so they cannot lag the committed runs).
    """
    from mbpo.run.metrics import note_passed_over
    from mbpo.run.plotting import load_runs, plot_model_health

    dirs = {learner: [run_dir_of(root, env, learner, s) for s in seeds] for learner in LEARNERS}
    result: dict[str, Any] = {"benchmark": "locomotion", "env": ENVS[env], "env_steps": STEPS,
                              "eval_every": EVAL_EVERY, "eval_episodes": EVAL_EPISODES, "seeds": seeds,
                              "score": f"mean of the last {LAST_EVALS} evaluations", "machine": machine(),
                              "learners": {}}
    for learner in LEARNERS:
        summary = summarize(learner, dirs[learner])
        if summary["runs"]:
            result["learners"][learner] = summary
    learners = result["learners"]
    for clock in ("wall", "cpu"):  # compute cost per 30k env steps against today's MBPO: wall-clock, and the
        base = learners.get("mbpo", {}).get(f"median_{clock}_s")  # CPU seconds (not loosened by a shared machine)
        for summary in learners.values():
            own = summary[f"median_{clock}_s"]
            summary[f"{clock}_over_mbpo"] = round(own / base, 2) if own and base else None
    paper = paper_curve(ENVS[env])
    if paper is not None:
        result["mbpo_paper"] = {"source": paper["source"],
                                **{f"at_{k}": paper_at(paper, k) for k in REPORT_AT}}  # (env steps, mean, std)
    published = published_curves(ENVS[env])
    if published:
        from published_curves import near

        result["published"] = {m: {"source": c["source"], "near_33333": near(c, 33_333)} for m, c in published.items()}
    summarized = [Path(r["run_dir"]) for summary in learners.values() for r in summary["runs"]]
    if summarized and importlib.util.find_spec("matplotlib") is None:
        # A chart is not worth a failed invocation: a queue of runs stops at a failed one.
        print("[locomotion] no charts: matplotlib is not installed (pip install -e '.[plots]'); the JSON line has "
              "every figure", file=sys.stderr)
    elif summarized:
        runs, passed = load_runs(summarized)
        note_passed_over("[locomotion] charts:", passed)  # a broken config.yaml: in the JSON line, not the chart
        charts = root if charts is None else charts
        charts.mkdir(parents=True, exist_ok=True)
        if runs:
            result["plot"] = str(draw(env, runs, charts / f"{env}_learning_curves.png", paper, published))
        for learner in ("mbpo", best):
            model_runs = [r for r in runs if r.path in dirs[learner]]
            health = plot_model_health(model_runs, charts / f"{env}_{learner}_model_health.png") if model_runs else None
            if health is not None:
                result[f"{learner}_model_health_plot"] = str(health)
    sync_vs_async = async_against_sync(learners)
    if sync_vs_async:
        result["async_vs_sync"] = sync_vs_async
    ours = learners.get(best, {}).get("median_score")
    targets: dict[str, Any] = {"learner": best}
    if ours is not None:
        targets[f"score_at_least_{SCORE_TARGETS[env]:.0f}"] = ours >= SCORE_TARGETS[env]
        peers = {m: learners[m]["median_score"] for m in MODEL_FREE if learners.get(m, {}).get("median_score")}
        targets["at_least_every_model_free"] = all(ours >= v for v in peers.values()) if peers else None
        targets["over_each_model_free"] = {m: round(ours / v, 3) for m, v in peers.items() if v > 0}
    result["targets"] = targets
    return result


def async_against_sync(learners: dict[str, Any]) -> dict[str, Any]:
    """Per seed run by both ``mbpo`` (async) and ``mbpo_sync``: returns at REPORT_AT and the wall-clock of
    each, and async's wall-clock over sync's (the async trainer's cost and gain on this machine).
    """
    def by_seed(learner: str) -> dict[str, dict[str, Any]]:
        return {Path(r["run_dir"]).name.rsplit("-s", 1)[1]: r for r in learners.get(learner, {}).get("runs", [])}

    asyncs, syncs = by_seed("mbpo"), by_seed("mbpo_sync")
    out = {}
    for seed in sorted(asyncs.keys() & syncs.keys()):
        a, s = asyncs[seed], syncs[seed]
        out[f"seed_{seed}"] = {"async": {"returns": a["returns"], "wall_s": a["wall_s"], "done": a["done"]},
                               "sync": {"returns": s["returns"], "wall_s": s["wall_s"], "done": s["done"]},
                               "wall_async_over_sync": round(a["wall_s"] / s["wall_s"], 3) if s["wall_s"] else None}
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _median(rows: list[dict[str, str]], column: str) -> float | None:
    """The median of a per-interval column over the rows after the first (whose interval holds the start-up)."""
    values = [float(r[column]) for r in rows[1:] if r.get(column)]
    return round(statistics.median(values), 3) if values else None


def _float(value: Any) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=sorted(ENVS), default="hopper")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--run-root", type=Path, default=Path.home() / "mbpo-runs" / "locomotion")
    parser.add_argument("--learners", nargs="+", choices=LEARNERS, default=["mbpo", "sac_same_ratio", "sb3"])
    parser.add_argument("--results", type=Path, default=None, help="copy finished runs' text files here")
    parser.add_argument("--report-only", action="store_true", help="summarize and plot what the run root holds")
    parser.add_argument("--best-mbpo", default=BEST_MBPO, choices=LEARNERS,
                        help="the MBPO learner the targets are on")
    parser.add_argument("--charts", type=Path, default=None,
                        help="draw the charts here (default: the run root; docs/img for docs/benchmarks.md's)")
    parser.add_argument("--env-steps", type=int, default=STEPS,
                        help="run length (a screening run is shorter; the report's figures are at 30,000)")
    args = parser.parse_args()
    from mbpo.run.logs import quiet_torchrl

    quiet_torchrl()
    root = args.run_root.expanduser()
    if args.report_only and not (root / args.env).is_dir():
        what = f"{root} does not exist" if not root.exists() else f"{root} has no {args.env} folder"
        print(f"error: --run-root {what}; expected a run root holding <env>/<learner>-s<seed> run dirs "
              "(e.g. docs/results/locomotion)", file=sys.stderr)
        raise SystemExit(2)
    if not args.report_only:
        for seed in args.seeds:  # seed-major, so an interrupted invocation has every learner at some seeds
            for learner in args.learners:
                run_dir = run_dir_of(root, args.env, learner, seed)
                print(f"[locomotion] {args.env} {learner} seed {seed}: {run_dir}", file=sys.stderr, flush=True)
                if learner == "sb3":
                    run_sb3(args.env, seed, run_dir)
                else:
                    run_ours(args.env, learner, seed, run_dir, args.env_steps)
                if args.results is not None and _done(run_dir):
                    export(run_dir, args.results / args.env / run_dir.name)
    print(json.dumps(report(args.env, root, args.seeds, args.best_mbpo, args.charts)))


if __name__ == "__main__":
    main()
