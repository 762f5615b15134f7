"""MBPO against SAC at the same update ratio on MuJoCo InvertedPendulum-v5, over seeds.

Every run trains ``configs/inverted_pendulum_mbpo.yaml`` (the MBPO paper's InvertedPendulum constants:
10 updates per real transition, epochs of 250 steps, target entropy -0.05, 500 random steps;
``model.enabled=false`` for SAC) with the sync trainer, in its own process on one core, evaluated every
250 env steps on 10 deterministic episodes (maximum return 1,000). A run ends at ``--steps`` env steps, or
once its last ``--hold`` evaluations are all 1,000: the task is solved and the return cannot rise, so the
rest of the budget would buy nothing (``run.json`` says which ended it).

Runs take up to an hour each on a 2-core CPU, so each (learner, seed) has its own run dir under
``--run-root`` (outside the checkout): a finished run is read, not rerun; one an earlier invocation's end
cut off resumes from its newest checkpoint. ``--jobs`` runs that many at once (one core each).
``--results DIR`` copies each finished run's config.yaml, metrics.csv and run.json there
(docs/results/inverted_pendulum in the repository); ``--report-only --run-root DIR`` rebuilds the JSON
line from such a copy. Prints one JSON line: per learner and seed the first env step with an evaluation
of 1,000, and the median over seeds. No target: the MBPO issue asks for the comparison.

``--learners`` picks the variants (default ``mbpo sac_same_ratio``; ``mbpo_deterministic`` is MBPO with
``model.deterministic_rollouts=true``).

    python benchmarks/inverted_pendulum.py [--seeds 0 1 2] [--learners L ...] [--steps 15000] [--hold 8] [--jobs 2]
                                           [--run-root ~/mbpo-runs/inverted_pendulum]
                                           [--results docs/results/inverted_pendulum] [--report-only]
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from locomotion import export, machine  # noqa: E402 (after the path: run as a script from anywhere)

from mbpo.run.checkpoint import list_checkpoints  # noqa: E402

CONFIG = ROOT / "configs" / "inverted_pendulum_mbpo.yaml"
VARIANTS = {"mbpo": [], "sac_same_ratio": ["model.enabled=false"],
            "mbpo_deterministic": ["model.deterministic_rollouts=true"]}
"""Learners: the shipped config, SAC without the model, and MBPO whose model steps are the elite's mean."""
DEFAULT_LEARNERS = ["mbpo", "sac_same_ratio"]
SOLVED = 1000.0  # InvertedPendulum's maximum return: 1 per step, 1,000 steps
EVAL_EVERY = 250


def evaluations(run_dir: Path) -> list[tuple[int, float, float]]:
    """(env steps, evaluation return, wall s) of every evaluation in the run's metrics.csv so far."""
    try:
        with open(run_dir / "metrics.csv") as f:
            rows = [r for r in csv.DictReader(f) if r.get("eval_return")]
    except OSError:
        return []
    return [(int(r["env_steps"]), float(r["eval_return"]), float(r["wall_s"])) for r in rows]


def solved(evals: list[tuple[int, float, float]], hold: int) -> bool:
    return len(evals) >= hold and all(ret >= SOLVED for _, ret, _ in evals[-hold:])


def _info(run_dir: Path) -> dict[str, Any]:
    try:
        info: dict[str, Any] = json.loads((run_dir / "run.json").read_text())
        return info
    except (OSError, ValueError):
        return {}


class Run:
    """One (learner, seed) run as a child process: started or resumed, stopped once solved."""

    def __init__(self, root: Path, learner: str, seed: int, steps: int, hold: int, device: str) -> None:
        self.learner, self.seed, self.hold, self.steps = learner, seed, hold, steps
        self.run_dir = root / f"{learner}-s{seed}"
        self.stopped_solved = False
        if list_checkpoints(self.run_dir / "checkpoints"):  # this invocation's budget, as a fresh run's
            cmd = [sys.executable, "-m", "mbpo", "resume", str(self.run_dir), f"total_env_steps={steps}"]
        else:
            cmd = [sys.executable, "-m", "mbpo", "train", "--config", str(CONFIG), f"run_dir={self.run_dir}",
                   f"seed={seed}", f"device={device}", "trainer=sync", "progress=false", f"total_env_steps={steps}",
                   "checkpoint.every=1000", *VARIANTS[learner]]
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(root / f"{learner}-s{seed}.log", "a")  # noqa: SIM115 (closed in poll)
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        print(f"[inverted_pendulum] {learner} seed {seed}: {' '.join(cmd[2:4])} {self.run_dir}", file=sys.stderr,
              flush=True)

    def poll(self) -> bool:
        """True once the process has ended; SIGTERM (a checkpoint, then exit) as soon as the run is solved."""
        if self.proc.poll() is None:
            if not self.stopped_solved and solved(evaluations(self.run_dir), self.hold):
                self.stopped_solved = True
                self.proc.send_signal(signal.SIGTERM)
            return False
        self.log.close()
        stopped_by_us = self.stopped_solved and self.proc.returncode in (128 + signal.SIGTERM, -signal.SIGTERM)
        if self.proc.returncode != 0 and not stopped_by_us:
            raise SystemExit(f"{self.learner} seed {self.seed} exited with {self.proc.returncode}; see "
                             f"{self.log.name} (the run resumes on the next invocation)")
        evals = evaluations(self.run_dir)
        at_budget = bool(evals) and evals[-1][0] >= self.steps  # it may have ended on its own just before the signal
        ended_by = "steps" if at_budget or not self.stopped_solved else (
            f"solved ({self.hold} evaluations in a row at {SOLVED:,.0f})")
        (self.run_dir / "run.json").write_text(json.dumps({**_info(self.run_dir), "done": True,
                                                           "ended_by": ended_by}, indent=1) + "\n")
        return True

    def stop(self) -> None:
        """SIGTERM (the child checkpoints and exits) and wait: no run outlives this script, holding its lock."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait()
        self.log.close()


def run_all(args: argparse.Namespace, root: Path) -> None:
    """Run every (learner, seed) not yet done, ``--jobs`` at a time; if one fails, or this script is stopped,
    the others are stopped with a checkpoint (the next invocation resumes them).
    """
    todo = [(learner, seed) for seed in args.seeds for learner in args.learners
            if not _info(root / f"{learner}-s{seed}").get("done")]
    running: list[Run] = []
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM unwinds as Ctrl-C does
    try:
        while todo or running:
            while todo and len(running) < args.jobs:
                learner, seed = todo.pop(0)
                running.append(Run(root, learner, seed, args.steps, args.hold, args.device))
            time.sleep(5)  # the children write an evaluation every few seconds at most; nothing finer to wait on
            for run in [r for r in running if r.poll()]:
                running.remove(run)
    finally:
        for run in running:
            run.stop()
        signal.signal(signal.SIGTERM, previous)
        if args.results is not None:  # every finished run, this invocation's or an earlier one's
            for seed in args.seeds:
                for learner in args.learners:
                    if _info(run_dir := root / f"{learner}-s{seed}").get("done"):
                        export(run_dir, args.results / run_dir.name)


def report(root: Path, seeds: list[int], hold: int, learners: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"benchmark": "inverted_pendulum", "env": "InvertedPendulum-v5", "seeds": seeds,
                              "eval_every": EVAL_EVERY, "hold": hold, "machine": machine(), "learners": {}}
    for learner in learners:
        runs = []
        for seed in seeds:
            run_dir, evals = root / f"{learner}-s{seed}", evaluations(root / f"{learner}-s{seed}")
            if not evals:
                continue
            first = next(((s, w) for s, ret, w in evals if ret >= SOLVED), None)
            info = _info(run_dir)
            runs.append({"seed": seed, "done": bool(info.get("done")), "ended_by": info.get("ended_by"),
                         "env_steps": evals[-1][0], "first_1000_at": first[0] if first else None,
                         "first_1000_wall_s": round(first[1]) if first else None,
                         "curve": [(s, round(ret, 1)) for s, ret, _ in evals]})
        # a finished run that never reached 1,000 counts as its last env step: a lower bound
        firsts = [r["first_1000_at"] or r["env_steps"] for r in runs if r["done"]]
        result["learners"][learner] = {"runs": runs, "seeds_done": len(firsts),
                                       "median_first_1000_at": statistics.median(firsts) if firsts else None,
                                       "runs_never_at_1000": sum(r["first_1000_at"] is None for r in runs)}
    medians = {k: v["median_first_1000_at"] for k, v in result["learners"].items()}
    sac = medians.get("sac_same_ratio")
    for learner, median in medians.items():
        if learner != "sac_same_ratio" and median and sac:
            result[f"{learner}_over_sac_env_steps"] = round(median / sac, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--learners", nargs="+", choices=list(VARIANTS), default=DEFAULT_LEARNERS)
    parser.add_argument("--steps", type=int, default=15000, help="env steps at most per run")
    parser.add_argument("--hold", type=int, default=8, help="evaluations in a row at 1,000 that end a run")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one core each)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--run-root", type=Path, default=Path.home() / "mbpo-runs" / "inverted_pendulum")
    parser.add_argument("--results", type=Path, default=None, help="copy finished runs' text files here")
    parser.add_argument("--report-only", action="store_true", help="summarize what the run root holds")
    args = parser.parse_args()
    args.learners = list(dict.fromkeys(args.learners))  # one run per (learner, seed): a run dir has one writer
    if args.jobs < 1 or args.hold < 1 or args.steps < EVAL_EVERY:
        parser.error(f"expected --jobs >= 1, --hold >= 1 and --steps >= {EVAL_EVERY}")
    root = args.run_root.expanduser()
    if not args.report_only:
        try:
            run_all(args, root)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: run_all has stopped every run with a checkpoint
            raise SystemExit("[inverted_pendulum] stopped; every unfinished run is checkpointed and resumes on the "
                             "next invocation") from None
    print(json.dumps(report(root, args.seeds, args.hold, args.learners)))


if __name__ == "__main__":
    main()
