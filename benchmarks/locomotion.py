"""MuJoCo Hopper-v5 and Walker2d-v5: MBPO-SAC against SAC at the same 20 updates per step and Stable-Baselines3 SAC.

One invocation runs (or picks up) every requested learner and seed on this machine, prints one JSON line and
draws the learning curves (the mean over seeds with its 95% bootstrap band: REDQ against MBPO with REDQ's critic in
one panel, the published curves in another, our other learners in a third) and the MBPO runs' model-health chart.
Every learner is evaluated every 2,500 env steps on 10 deterministic episodes; env steps count the 5,000 random
steps, as the MBPO authors' own curves do (their x runs 6,019, 7,019, ...: jannerm/mbpo's
``sampler/total-samples``), which are drawn beside ours from docs/results/locomotion/mbpo_paper.json (gym -v2,
MuJoCo 1.50).

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
DIR --charts docs/img`` rebuilds the JSON line and docs/benchmarks.md's charts from such a copy. Each learner's
mean and IQM score carry 95% stratified-bootstrap intervals, and ``--best-mbpo`` against REDQ the probability of
improvement with its interval, all from rliable (Agarwal et al. 2021; the ``bench`` extra). Targets (issue 50), on
``--best-mbpo``: a mean score of at least 1,850 on Hopper (REDQ's published mean) and 700 on Walker2d, an IQM at
least REDQ's, and the probability of improvement over REDQ above 0.5 at its interval's lower bound, all judged on
the seeds both learners finished at 30k, once there are five (null before).

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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
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
MIN_SEEDS = 5
"""Seeds both learners must have finished at full length before issue 50's targets are judged."""
MODEL_FREE = ("sac_same_ratio", "sb3", "redq", "droq", "crossq")
"""The learners without a model, each of which the best MBPO must match (issue 37's target)."""
BEST_MBPO = "mbpo_redq"
"""MBPO with the critic option the Hopper screen picked (docs/benchmarks.md, "Critic options")."""
SCORE_TARGETS = {"hopper": 1_850.0, "walker2d": 700.0}
"""The best MBPO's mean score to reach: REDQ's published Hopper mean at 33k, and 700 on Walker2d."""
PEER = "redq"
"""The learner the best MBPO must beat (issue 50): REDQ, the same critic with no model."""
CONFIDENCE = 0.95
BOOTSTRAP_REPS = 50_000
"""Resamples behind each mean's and IQM's interval: rliable's default for aggregate scores."""
POI_REPS = 2_000
"""Resamples behind the probability of improvement's interval, as rliable's README takes them (each resample runs
a Mann-Whitney U test, about 0.5 ms here)."""
CHART_REPS = 2_000
"""Resamples behind each chart band (every evaluation point of a curve in one bootstrap)."""
BOOTSTRAP_SEED = 0
"""Seeds numpy's global generator for each bootstrap, so that a report is the same for the same runs."""
INTERVALS_NEED = "intervals need rliable: pip install -e '.[bench]'"
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
    # resets every 6,000 env steps at utd 20 (at 11k, 17k, 23k, 29k by the nominal clock; the async learner runs a
    # few thousand updates behind it): every evaluation the screen (5k-15k) or the score (25k-30k) takes comes at
    # least 1,000 env steps (20,000 updates) after the last reset; the unscored one at 17.5k only ~500 after one
    "mbpo_redq_resets": ("mbpo_redq", ["agent.sac.reset_every=120000"]),
    "mbpo_redq_loop": ("mbpo_redq", ["model.lookahead.enabled=true"]),  # LOOP's ARC plans the behaviour actions
}
"""Our learners: ``configs/<env>_<stem>.yaml`` and the overrides on it (and :data:`ENV_OVERRIDES`)."""
ENV_OVERRIDES: dict[str, dict[str, list[str]]] = {
    # MACURA's xi and zeta per env, from the authors' configs (Data-Science-in-Mechanical-Engineering/macura,
    # mbrl/examples/conf/overrides/macura_{hopper,walker}.yaml): a loose border on Hopper, a tight one on Walker2d
    "mbpo_redq_macura": {"hopper": ["model.macura_scale=30", "model.macura_quantile=0.9"],
                         "walker2d": ["model.macura_scale=0.3", "model.macura_quantile=0.95"]},
}
"""Overrides that differ by env, after the learner's own."""


def learner_config(env: str, learner: str) -> tuple[Path, list[str]]:
    """The config file and overrides that make ``learner`` on ``env``."""
    stem, overrides = CONFIGS[learner]
    return ROOT / "configs" / f"{env}_{stem}.yaml", [*overrides, *ENV_OVERRIDES.get(learner, {}).get(env, [])]
LEARNERS = (*CONFIGS, "sb3", "crossq_sbx")
RUNNABLE = (*CONFIGS, "sb3")
"""What this script runs; ``crossq_sbx`` (the CrossQ authors' sbx code) runs with benchmarks/sbx_crossq.py in its
own venv and is only read here."""
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
          "mbpo_redq_resets": "MBPO with REDQ's critic, networks reset every 120,000 updates (ours, utd 20)",
          "mbpo_redq_loop": "MBPO with REDQ's critic, behaviour actions planned by LOOP's ARC (ours, utd 20)",
          "crossq_sbx": "CrossQ, the authors' sbx code (utd 1, critics 2048 wide; benchmarks/sbx_crossq.py)"}
NAMES = {"mbpo": "MBPO-SAC", "sac_same_ratio": "SAC (utd 20)", "sb3": "SB3 SAC", "mbpo_sync": "MBPO-SAC, sync trainer",
         "mbpo_lead0": "MBPO-SAC, lead not capped", "mbpo_redq": "MBPO-REDQ", "mbpo_droq": "MBPO-DroQ", "redq": "REDQ",
         "droq": "DroQ", "crossq": "CrossQ", "mbpo_redq_masked": "MBPO-REDQ, M2AC masking 0.5",
         "mbpo_redq_real_half": "MBPO-REDQ, real_ratio 0.5", "mbpo_redq_nstep3": "MBPO-REDQ, 3-step model rows",
         "mbpo_redq_macura": "MBPO-REDQ, MACURA", "mbpo_redq_resets": "MBPO-REDQ, resets",
         "mbpo_redq_loop": "MBPO-REDQ, LOOP planning",
         "crossq_sbx": "CrossQ (sbx, the authors' code)"}
"""The charts' names, the field's (LABELS, with the settings, stay in the JSON); a learner missing here is drawn
under its LABELS entry."""
KEPT = ("config.yaml", "metrics.csv", "run.json", "resumes.yaml")
"""What --results keeps of a finished run (small text files; no checkpoints)."""
PUBLISHED_AS = {"redq": "redq", "droq": "droq", "crossq": "crossq", "sac": "sb3"}
"""Our learner that each published curve (published.json's keys) is drawn beside, in the same colour: SB3 SAC for
SAC at one update per step."""
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
        path, learner_overrides = learner_config(env, learner)
        overrides = [f"run_dir={run_dir}", f"seed={seed}", f"total_env_steps={steps}", f"eval_every={EVAL_EVERY}",
                     f"eval_episodes={EVAL_EPISODES}", f"checkpoint.every={CHECKPOINT_EVERY}", "progress=false",
                     *learner_overrides]
        trainer = make_trainer(load_config(path, overrides), run_dir)
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


SCREEN = (5_000, 15_000)
"""Issue 50's screen: 15,000 env steps, scored on the mean of the evaluations from 5k to 15k (five of them)."""


def screen_score(evals: dict[int, float]) -> float | None:
    """The mean of the evaluations from SCREEN's start to its end (the async trainer's land a few dozen steps
    past each milestone, so up to half an eval interval past the end counts), or None before the run reached it.
    """
    start, end = SCREEN
    within = [evals[s] for s in sorted(evals) if start <= s < end + EVAL_EVERY // 2]
    if not within or not any(s >= end - EVAL_EVERY // 2 for s in evals):
        return None
    return round(statistics.fmean(within), 1)


def last_evals_mean(evals: dict[int, float], end: int = STEPS) -> float | None:
    """The mean of the LAST_EVALS evaluations at a run's ``end`` and the EVAL_EVERY marks before it (25k, 27.5k
    and 30k for a 30k run), each the evaluation nearest its mark within half an interval; None where one is
    missing (a run not that far yet), so no other evaluation stands in for it by position.
    """
    marks = [end - k * EVAL_EVERY for k in range(LAST_EVALS)]
    found = [min((s for s in evals if abs(s - m) <= EVAL_EVERY // 2), key=lambda s: abs(s - m), default=None)
             for m in marks]
    if any(s is None for s in found) or len(set(found)) < LAST_EVALS:
        return None
    return round(statistics.fmean(evals[s] for s in found if s is not None), 1)


Rliable = tuple[Any, Any]
"""``(rliable.library, rliable.metrics)``."""


def load_rliable() -> Rliable | str:
    """rliable's library and metrics, or the note that says why there are no intervals: a report after hours of
    runs is not worth failing for its intervals (arch 7 under pandas 3, say, fails on import with a TypeError).
    """
    try:
        from rliable import library, metrics
    except Exception as exc:  # noqa: BLE001 - whatever the import raised is named in the note
        return f"{INTERVALS_NEED} ({type(exc).__name__}: {' '.join(str(exc).split())})"
    return library, metrics


@contextmanager
def _numpy_seeded(seed: int) -> Iterator[None]:
    """rliable 1.2 resamples with ``np.random.choice``, numpy's global generator, whatever ``random_state`` it is
    given (arch only deprecates that argument): seed the global generator for the call, and put it back after.
    """
    import numpy as np

    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def interval(library: Any, scores: Any, func: Callable[..., Any], reps: int) -> Any:
    """rliable's 95% stratified-bootstrap percentile interval of ``func`` (which returns a 1-D array) on ``scores``
    (an array of shape ``(seeds, tasks, ...)``, or a list of such arrays resampled apart): an array of shape
    ``(2, len(func(scores)))``, lows then highs, the same for the same input.
    """
    with _numpy_seeded(BOOTSTRAP_SEED):
        _, ci = library.get_interval_estimates({"x": scores}, func, reps=reps, confidence_interval_size=CONFIDENCE)
    return ci["x"].reshape(2, -1)


def score_estimates(scores: Sequence[float], reps: int | None, stats: Rliable | str) -> dict[str, Any]:
    """The mean and the IQM (the mean of the middle half; Agarwal et al. 2021) of a learner's seed scores, each
    with its interval (:func:`interval` on one task: a ``(seeds, 1)`` score matrix). Under two seeds an interval
    is None (every resample is the one score again); without rliable the mean stands alone.
    """
    out: dict[str, Any] = {"mean_score": round(statistics.fmean(scores), 1) if scores else None,
                           "mean_score_ci": None, "iqm_score": None, "iqm_score_ci": None}
    if not scores or isinstance(stats, str):
        return out
    import numpy as np

    library, metrics = stats
    matrix = np.asarray(scores, dtype=float)[:, None]
    for name, aggregate in (("mean", metrics.aggregate_mean), ("iqm", metrics.aggregate_iqm)):
        out[f"{name}_score"] = round(float(aggregate(matrix)), 1)
        if len(scores) >= 2:
            low, high = interval(library, matrix, lambda m, f=aggregate: np.array([f(m)]),
                                 BOOTSTRAP_REPS if reps is None else reps)[:, 0]
            out[f"{name}_score_ci"] = [round(float(low), 1), round(float(high), 1)]
    return out


def improvement(of: dict[int, float], over: dict[int, float], reps: int | None,
                stats: Rliable | str) -> dict[str, Any]:
    """The probability of improvement of one learner over another (rliable: P(a seed's score of the first is
    above a seed's of the second), the Mann-Whitney U statistic over every pair), on the seeds both have done,
    with its interval (each learner's seeds resampled apart: rliable's StratifiedIndependentBootstrap).
    """
    seeds = sorted(of.keys() & over.keys())
    out: dict[str, Any] = {"seeds": seeds, "probability": None, "ci": None}
    if not seeds or isinstance(stats, str):
        return out
    import numpy as np

    library, metrics = stats
    x, y = (np.asarray([scores[s] for s in seeds], dtype=float)[:, None] for scores in (of, over))
    out["probability"] = round(float(metrics.probability_of_improvement(x, y)), 3)
    if len(seeds) >= 2:
        low, high = interval(library, [x, y], lambda a, b: np.array([metrics.probability_of_improvement(a, b)]),
                             POI_REPS if reps is None else reps)[:, 0]
        out["ci"] = [round(float(low), 3), round(float(high), 3)]
    return out


def seed_of(run_dir: Path) -> int:
    """The seed in a run dir's name (``<learner>-s<seed>``, :func:`run_dir_of`)."""
    return int(run_dir.name.rsplit("-s", 1)[1])


def question_learners(learners: dict[str, Any], best: str = BEST_MBPO) -> list[str]:
    """The learners of the charts' question panel: REDQ, ``best``, and each other MBPO with REDQ's critic that has
    three seeds done at STEPS; in a run root of screens (no run at STEPS), every one of them.
    """
    screens = not any(full_length(summary) for summary in learners.values())
    return [m for m in (PEER, best) if m in learners] + [
        m for m in learners if m.startswith(BEST_MBPO) and m not in (PEER, best)
        and (screens or full_length(learners[m]) >= 3)]


def full_length(summary: dict[str, Any]) -> int:
    """How many of a learner's runs are done at STEPS (a screen's runs stop at 15,000)."""
    return sum(_full(r) for r in summary.get("runs", []))


def done_scores(summary: dict[str, Any]) -> dict[int, float]:
    """A learner's score per done seed (:func:`summarize`'s runs): its full-length (STEPS) runs where it has any,
    else (a root of screens) its runs of their own length; never the two mixed.
    """
    return {r["seed"]: r["score"] for r in scored_runs(summary)}


def scored_runs(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs :func:`done_scores` scores: the ones the chart draws too, so that its curves and its legend's
    seeds are the score's (a run still in progress would end every curve at its last evaluation).
    """
    done = [r for r in summary.get("runs", []) if r["done"] and r["score"] is not None]
    full = [r for r in done if _full(r)]
    return full or done


def comparable_scores(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[int, float], dict[int, float]]:
    """Two learners' :func:`done_scores` where they are at one length (both with full-length runs, or both with
    screens only); else nothing: a screen's 15k score against a 30k one compares two other things.
    """
    if scored_at_full_length(a) != scored_at_full_length(b):
        return {}, {}
    return done_scores(a), done_scores(b)


def scored_at_full_length(summary: dict[str, Any]) -> bool:
    """Whether a learner's scores (:func:`scored_runs`) are at full length, not a screen's: a run at STEPS whose
    score could not be read leaves its screens to be scored.
    """
    return any(_full(r) for r in scored_runs(summary))


def full_scores(summary: dict[str, Any]) -> dict[int, float]:
    """A learner's score per seed done at full length (STEPS) only: what issue 50's targets are judged on."""
    return {r["seed"]: r["score"] for r in summary.get("runs", []) if _full(r) and r["score"] is not None}


def _full(run: dict[str, Any]) -> bool:
    return bool(run["done"]) and run["env_steps"] >= STEPS - EVAL_EVERY // 2


def summarize(learner: str, run_dirs: list[Path], reps: int | None = None,
              stats: Rliable | str | None = None) -> dict[str, Any]:
    """A learner's figures over its run dirs that have evaluations; a seed not run (no dir) is left out, and
    a run not evaluated yet or unreadable is left out with a note on stderr naming it and why. The score's mean
    and IQM over the done seeds come with their intervals (:func:`score_estimates`, ``reps`` resamples, default
    BOOTSTRAP_REPS; ``stats`` as :func:`load_rliable` returns it, loaded here when not given).
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
            "run_dir": str(run_dir), "seed": seed_of(run_dir), "env_steps": int(last["env_steps"]),
            "wall_s": float(last["wall_s"]),
            "cpu_s": _float(last.get("cpu_s")),  # None for runs logged before metrics.csv had it
            "done": _done(run_dir), "returns": returns_at(evals),
            # scored at its own length: a screen's 15k run on 10k-15k (done_scores keeps it apart from 30k runs)
            "score": last_evals_mean(evals, round(int(last["env_steps"]) / EVAL_EVERY) * EVAL_EVERY),
            "screen_score": screen_score(evals), "cpu_flags": _cpu_flags(run_dir),
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
    by_seed = done_scores(out)
    scores = list(by_seed.values())
    out["median_score"] = round(statistics.median(scores), 1) if scores else None
    out["score_range"] = [min(scores), max(scores)] if scores else None
    out["score_seeds"] = sorted(by_seed)
    out["screen_scores"] = {r["seed"]: r["screen_score"] for r in sorted(runs, key=lambda r: r["seed"])
                            if r["screen_score"] is not None}
    out |= score_estimates([by_seed[s] for s in sorted(by_seed)], reps,
                           load_rliable() if stats is None else stats)
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


def intervals_record(stats: Rliable | str, reps: int | None) -> dict[str, Any]:
    """How the report's intervals were computed, or the note that says why there are none."""
    if isinstance(stats, str):
        return {"note": stats}
    from importlib.metadata import version

    return {"by": f"rliable {version('rliable')} get_interval_estimates: stratified bootstrap over seeds, percentile",
            "confidence": CONFIDENCE, "reps": BOOTSTRAP_REPS if reps is None else reps,
            "probability_of_improvement_reps": POI_REPS if reps is None else reps,
            "chart_reps": CHART_REPS if reps is None else reps, "numpy_seed": BOOTSTRAP_SEED}


def mean_curve(runs: list[Run], reps: int, stats: Rliable | str) -> dict[str, Any] | None:
    """A learner's mean over seeds at each evaluation (runs aligned as ``mbpo plot`` aligns them: :func:`curves`)
    and its 95% bootstrap band, ``(lows, highs)`` (None under two seeds or without rliable); None without points.
    """
    from mbpo.run.plotting import curves

    found = list(curves([replace(r, label="one learner", settings=()) for r in runs]).values())
    if not found:
        return None
    c = found[0]
    every = [i for i, n in enumerate(c["counts"]) if n == len(c["seeds"])]  # the points every seed has
    x, values = [c["x"][i] for i in every], [c["values"][i] for i in every]
    if not values:
        return None
    band = None
    if len(c["seeds"]) >= 2 and values and not isinstance(stats, str):
        import numpy as np

        matrix = np.asarray(values, dtype=float).T[:, None, :]  # (seeds, 1 task, evaluations)
        band = interval(stats[0], matrix, lambda m: np.mean(m, axis=(0, 1)), reps)
    return {"x": x, "mean": [statistics.fmean(v) for v in values], "band": band, "seeds": len(c["seeds"])}


def draw(env: str, runs: dict[str, list[Run]], out: Path, paper: dict[str, Any] | None,
         published: dict[str, Any] | None = None, question: Sequence[str] = (PEER, BEST_MBPO),
         summaries: dict[str, Any] | None = None, reps: int = CHART_REPS,
         stats: Rliable | str | None = None) -> Path:
    """The answer on one figure, each learner of ours as its mean over seeds with its 95% bootstrap band: on top
    the question (``question``: REDQ against MBPO with REDQ's critic), the legend carrying each one's mean score
    and its interval (``summaries``: :func:`summarize`'s); below left the published curves with our first two
    means; below right our other learners, REDQ's mean for reference. A run root of screens (shorter runs) is
    drawn on its own length, without the 30k target.
    """
    from mbpo.run.plotting import _pyplot

    plt = _pyplot()
    stats = load_rliable() if stats is None else stats
    means = {m: c for m, rs in runs.items() if rs and (c := mean_curve(rs, reps, stats)) is not None}
    shown = [m for m in question if m in means]
    others = [m for m in means if m not in shown]
    tab20 = plt.get_cmap("tab20").colors
    palette = [tab20[i] for i in (*range(0, 20, 2), *range(1, 20, 2))]  # the ten dark ones first
    colors = {m: palette[i % 20] for i, m in enumerate(shown + others)}
    end = max((c["x"][-1] for c in means.values()), default=STEPS)
    full = end >= STEPS - EVAL_EVERY // 2

    def name(m: str) -> str:
        return NAMES.get(m, LABELS[m])

    def line(ax: Any, m: str, label: str, band: bool = True, **style: Any) -> None:
        c = means[m]
        ax.plot(c["x"], c["mean"], label=label, color=colors[m], **({"marker": "o", "ms": 3} | style))
        if band and c["band"] is not None:
            ax.fill_between(c["x"], c["band"][0], c["band"][1], color=colors[m], alpha=0.18, lw=0)

    fig = plt.figure(figsize=(12, 10), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=(1.2, 1))
    top = fig.add_subplot(grid[0, :])
    left = fig.add_subplot(grid[1, 0], sharey=top)  # its own x: the published curves run to 33k and beyond
    right = fig.add_subplot(grid[1, 1], sharex=top, sharey=top)
    for m in shown:
        k, score = means[m]["seeds"], (summaries or {}).get(m, {})
        label = f"{name(m)} ({k} seed{'s' if k > 1 else ''})"
        if score.get("mean_score") is not None:
            ci = score.get("mean_score_ci")
            label += f": mean score {score['mean_score']:,.0f}" + (f" [{ci[0]:,.0f}, {ci[1]:,.0f}]" if ci else "")
        line(top, m, label, lw=2)
    if full and shown:
        top.axhline(SCORE_TARGETS[env], color="grey", ls="--", lw=0.9,
                    label=f"target for MBPO's mean score at {STEPS:,}: {SCORE_TARGETS[env]:,.0f}")
    top.set_title("Does the model pay against its own critic? REDQ against MBPO with REDQ's critic "
                  f"(score: mean of the last {LAST_EVALS} evaluations, its 95% interval)", fontsize=10)
    if paper is not None:
        keep = [i for i, x in enumerate(paper["env_steps"]) if x <= end + 2_000]
        x, y, sd = ([paper[k][i] for i in keep] for k in ("env_steps", "return", "std"))
        left.plot(x, y, "k--", lw=1.2, label=f"MBPO paper ({paper['source_short']}), mean and std")
        left.fill_between(x, [a - b for a, b in zip(y, sd, strict=True)],
                          [a + b for a, b in zip(y, sd, strict=True)], color="k", alpha=0.08)
    spare = iter(c for c in palette if c not in colors.values())
    for method, curve in (published or {}).items():
        keep = [i for i, x in enumerate(curve["env_steps"]) if x <= end + 4_000]
        ours = PUBLISHED_AS.get(method)  # the published curve in our learner's colour, where we ran it
        left.plot([curve["env_steps"][i] for i in keep], [curve["mean"][i] for i in keep], ":", marker="x", ms=4,
                  lw=1.0, color=colors[ours] if ours in colors else next(spare),
                  label=f"{curve['label']}, mean of {max(curve['seeds'])} seeds")
    for m in shown[:2]:
        line(left, m, f"{name(m)} (ours), mean of {means[m]['seeds']} seed{'s' if means[m]['seeds'] > 1 else ''}",
             band=False, ms=2, lw=1.4)
    left.set_title("Published curves (their code, gym -v2 and -v4), ours beside them", fontsize=10)
    for m in others:
        k = means[m]["seeds"]
        line(right, m, f"{name(m)} ({k} seed{'s' if k > 1 else ''})", ms=2, lw=1.2)
    if PEER in means:
        right.plot(means[PEER]["x"], means[PEER]["mean"], color="grey", lw=1.0, ls="--",
                   label=f"{name(PEER)} (top), for reference")
    right.set_title("Our other learners", fontsize=10)
    for ax in (top, left, right):
        ax.axvline(RANDOM_STEPS, color="grey", lw=0.6, ls=":")
        ax.set_xlabel("env steps (including the 5,000 random ones)", fontsize=9)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8 if ax is top else 7, loc="upper left")
    top.set_ylabel("evaluation return (10 episodes)")
    left.set_ylabel("evaluation return (10 episodes)")
    bands = "95% bootstrap band (rliable)" if not isinstance(stats, str) else f"no bands: {INTERVALS_NEED}"
    what = f"{end:,.0f} env steps" + ("" if full else ", screens")
    top.set_xlim(0, end + EVAL_EVERY // 2)
    fig.suptitle(f"{ENVS[env]} ({what}): each learner's mean over seeds, {bands}", fontsize=12)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def report(env: str, root: Path, seeds: list[int], best: str = BEST_MBPO,
           charts: Path | None = None, reps: int | None = None) -> dict[str, Any]:
    """The JSON line: every learner's runs and its median, mean and IQM score (the last two with intervals), the
    compute cost of each against today's MBPO, the probability that ``best`` improves on REDQ, the published
    curves' figures at 30k, the targets; and the charts, drawn into ``charts`` (the run root by default; docs/img
    for the ones docs/benchmarks.md shows, so they cannot lag the committed runs). ``reps`` replaces every
    bootstrap's number of resamples (BOOTSTRAP_REPS, POI_REPS, CHART_REPS), for quick tests.
    """
    from mbpo.run.metrics import note_passed_over
    from mbpo.run.plotting import load_runs, plot_model_health

    dirs = {learner: [run_dir_of(root, env, learner, s) for s in seeds] for learner in LEARNERS}
    result: dict[str, Any] = {"benchmark": "locomotion", "env": ENVS[env], "env_steps": STEPS,
                              "eval_every": EVAL_EVERY, "eval_episodes": EVAL_EPISODES, "seeds": seeds,
                              "score": f"mean of the last {LAST_EVALS} evaluations", "machine": machine()}
    stats = load_rliable()
    result["intervals"] = intervals_record(stats, reps)
    result["learners"] = {}
    if isinstance(stats, str):
        print(f"[locomotion] no intervals: {stats}; the JSON line has every other figure", file=sys.stderr)
    for learner in LEARNERS:
        summary = summarize(learner, dirs[learner], reps, stats)
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
    poi = {"of": best, "over": PEER,
           **improvement(*comparable_scores(learners.get(best, {}), learners.get(PEER, {})), reps, stats)}
    result["probability_of_improvement"] = poi
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
            scored = {Path(r["run_dir"]) for summary in learners.values() for r in scored_runs(summary)}
            by_learner = {m: [r for r in runs if r.path in dirs[m] and r.path in scored] for m in learners}
            result["plot"] = str(draw(env, by_learner, charts / f"{env}_learning_curves.png", paper, published,
                                      question_learners(learners, best), learners,
                                      CHART_REPS if reps is None else reps, stats))
        for learner in ("mbpo", best):
            model_runs = [r for r in runs if r.path in dirs[learner]]
            health = plot_model_health(model_runs, charts / f"{env}_{learner}_model_health.png") if model_runs else None
            if health is not None:
                result[f"{learner}_model_health_plot"] = str(health)
    sync_vs_async = async_against_sync(learners)
    if sync_vs_async:
        result["async_vs_sync"] = sync_vs_async
    mine, peer = learners.get(best, {}), learners.get(PEER, {})
    targets: dict[str, Any] = {"learner": best, "peer": PEER, **judge(env, full_scores(mine), full_scores(peer),
                                                                      poi, reps, stats)}
    ours = mine.get("median_score")  # the ratios to each model-free learner stay on the median, as docs read them
    if ours is not None:  # against the model-free learners scored at our length only
        peers = {m: learners[m]["median_score"] for m in MODEL_FREE if learners.get(m, {}).get("median_score")
                 and scored_at_full_length(learners[m]) == scored_at_full_length(mine)}
        targets["at_least_every_model_free"] = all(ours >= v for v in peers.values()) if peers else None
        targets["over_each_model_free"] = {m: round(ours / v, 3) for m, v in peers.items() if v > 0}
    result["targets"] = targets
    return result


def judge(env: str, mine: dict[int, float], peer: dict[int, float], poi: dict[str, Any], reps: int | None,
          stats: Rliable | str | None) -> dict[str, Any]:
    """Issue 50's targets, judged on the seeds both learners finished at full length and only once there are
    MIN_SEEDS of them (None until then): the mean and IQM of each over those same seeds, and the probability of
    improvement's interval (:func:`improvement` takes the same seeds). rliable compares the two sets of seeds
    unpaired; taking the common seeds only keeps either learner from being judged on runs the other lacks.
    """
    common = sorted(set(mine) & set(peer))  # full_scores: runs done at full length only
    out: dict[str, Any] = {"common_seeds": common, f"{MIN_SEEDS}_common_seeds": len(common) >= MIN_SEEDS}
    keys = (f"mean_at_least_{SCORE_TARGETS[env]:.0f}", f"iqm_at_least_{PEER}", "improvement_lower_bound_above_0.5")
    if len(common) < MIN_SEEDS:
        return out | dict.fromkeys(keys, None)
    stats = load_rliable() if stats is None else stats
    ours = score_estimates([mine[s] for s in common], reps, stats)
    theirs = score_estimates([peer[s] for s in common], reps, stats)
    iqm, peer_iqm = ours["iqm_score"], theirs["iqm_score"]  # None without rliable
    out |= {"mean_score": ours["mean_score"], "iqm_score": iqm, "peer_iqm_score": peer_iqm}
    return out | dict(zip(keys, (ours["mean_score"] >= SCORE_TARGETS[env],
                                 None if iqm is None or peer_iqm is None else iqm >= peer_iqm,
                                 None if poi["ci"] is None else poi["ci"][0] > 0.5), strict=True))


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
    parser.add_argument("--learners", nargs="+", choices=RUNNABLE, default=["mbpo", "sac_same_ratio", "sb3"])
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
