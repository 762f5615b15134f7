"""The cheap headline rows, re-measured against the figures stored in docs/results/headlines.json.

A guard: run it before and after any change to a default (a schema default, a shipped config's constant, a
trainer's rule), so that no headline moves silently. Rows (``--only`` picks some):

* ``pendulum``: the default config (configs/pendulum_mbpo.yaml, MBPO-SAC on native Pendulum-v1), sync
  trainer, seeds 0-2: env steps to the first 50-episode evaluation after which every evaluation stays at
  -200 or better (benchmarks/sample_efficiency.py's rule).
* ``cartpole``: MBPO-DQN on native CartPole-v1 (configs/cartpole_mbpo.yaml), sync, seeds 0-2: env steps to
  the first 10-episode evaluation at or above 475 (``sample_efficiency.py --task cartpole``'s rule); a run
  stops once it has its answer.
* ``throughput``: native Pendulum and CartPole at 4,096 envs against gymnasium, as ratios
  (benchmarks/env_throughput.py's eager head-to-head pairs).

Each row in the JSON file holds its command, its figures and its noise band. The sync trainer is
deterministic on one kind of CPU, so on the CPU the figures were stored from (same model name and flags,
:func:`mbpo.run.provenance.machine`) steps to threshold must match seed by seed; on another CPU a run can take
another path, and only the median is compared, within the band. A row may also hold the figures of other CPUs
(``on_other_machines``), each measured at the same code: on such a CPU its own figures are matched seed by seed.
Throughput ratios are noisy on any CPU: a relative band. Prints one JSON line (what was measured, what was
stored, and ``moved``: every figure outside its band) and exits 1 if anything moved, 2 if a run failed, else 0.

A move made on purpose: store the new figures (``--update`` writes them, with this machine and commit, and drops
other machines' figures, now stale) and update the docs that quote them (README.md, docs/benchmarks.md) in the
same commit. A CPU whose runs take another path at the same code (check by running the stored commit here):
``--add-machine`` stores its figures beside the others (replacing its own earlier ones, no other CPU's); on the
CPU a row's own figures came from it stores nothing for that row, and a move there still exits 1.

    python benchmarks/headlines.py [--only pendulum cartpole throughput] [--jobs 2] [--update | --add-machine]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sample_efficiency import first_reaching, steps_to_threshold

from mbpo.run.metrics import UnreadableMetricsError, eval_curve

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "docs" / "results" / "headlines.json"
POLL_S = 2.0
RULES = {"stays": steps_to_threshold, "first": first_reaching}
"""How a row turns its evaluation curve into env steps to threshold (None: not within the budget)."""


def steps_for(rule: str, threshold: float, evals: list[tuple[int, float]]) -> int | None:
    return RULES[rule](evals, threshold)


def settled(rule: str, threshold: float, evals: list[tuple[int, float]]) -> bool:
    """Whether the rest of the run can no longer change its figure (a first reaching is final; staying is
    only known at the end of the budget).
    """
    return rule == "first" and steps_for(rule, threshold, evals) is not None


def median_steps(steps: list[int | None]) -> float | None:
    """Median with a run that never reached the threshold counted as the largest (None if the median is one)."""
    median = statistics.median(float("inf") if s is None else s for s in steps)
    return None if median == float("inf") else median


def steps_figures(steps: dict[int, int | None]) -> dict[str, float | None]:
    """``{"0": ..., "1": ..., "median": ...}`` from per-seed env steps to threshold."""
    return {**{str(seed): s for seed, s in steps.items()}, "median": median_steps(list(steps.values()))}


def within(stored: float | None, measured: float | None, band: float, unit: str) -> bool:
    """Whether ``measured`` lies in ``stored``'s noise band: ``band`` env steps either side, or a ``relative``
    fraction of it; a threshold never reached (None) only matches another None.
    """
    if stored is None or measured is None:
        return stored is None and measured is None
    if unit == "relative":
        return abs(measured - stored) <= band * abs(stored)
    return abs(measured - stored) <= band


def compare(row: dict[str, Any], measured: dict[str, float | None], same_cpu: bool,
            figures: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures of ``measured`` outside ``row``'s band around the stored ``figures`` (the row's own by default):
    ``{name: {"stored": ..., "measured": ...}}``. On another CPU only the figures ``band["other_cpu_compares"]``
    names are compared (all when it is absent).
    """
    figures = row["figures"] if figures is None else figures
    band = row["band"]
    width = band["same_cpu"] if same_cpu else band["other_cpu"]
    names = list(figures) if same_cpu else band.get("other_cpu_compares", list(figures))
    return {name: {"stored": figures[name], "measured": measured.get(name)} for name in names
            if not within(figures[name], measured.get(name), width, band["unit"])}


def same_machine(stored: dict[str, Any], here: dict[str, Any]) -> bool:
    return stored.get("cpu") == here.get("cpu") and sorted(stored.get("cpu_flags", [])) == sorted(
        here.get("cpu_flags", []))


def reference(row: dict[str, Any], here: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The stored figures to hold this machine's to, and whether they were measured on its kind of CPU: the
    row's own, or another machine's of ``on_other_machines``.
    """
    if same_machine(row["measured_on"], here):
        return row["figures"], True
    for other in row.get("on_other_machines", []):
        if same_machine(other, here):
            return other["figures"], True
    return row["figures"], False


def train(row: dict[str, Any], seed: int) -> dict[str, Any]:
    """One seed of a training row: its command in a fresh run dir, stopped early once its figure is settled."""
    with tempfile.TemporaryDirectory(prefix="headlines-") as tmp:
        run_dir = Path(tmp) / "run"
        argv = shlex.split(row["command"].format(seed=seed, run_dir=run_dir))
        if argv[0] == "python":
            argv[0] = sys.executable
        start = time.perf_counter()
        evals: list[tuple[int, float]] = []
        with open(Path(tmp) / "log.txt", "w+") as log:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            stopped = False
            while proc.poll() is None:
                time.sleep(POLL_S)
                if (run_dir / "metrics.csv").exists():
                    evals = eval_curve(run_dir / "metrics.csv")  # complete rows only: a half-written one is left out
                    if settled(row["rule"], row["threshold"], evals):
                        proc.terminate()  # the trainer stops cleanly on SIGTERM
                        proc.wait()
                        stopped = True
            if proc.returncode != 0 and not stopped:
                log.seek(0)
                return {"seed": seed, "error": f"exit {proc.returncode}: {log.read()[-2000:]}"}
        try:
            evals = eval_curve(run_dir / "metrics.csv")
        except UnreadableMetricsError as exc:  # a run that exited 0 without its metrics: a failed run, named
            return {"seed": seed, "error": str(exc)}
    return {"seed": seed, "steps": steps_for(row["rule"], row["threshold"], evals), "stopped_early": stopped,
            "wall_s": round(time.perf_counter() - start, 1), "evals": [(s, round(r, 1)) for s, r in evals]}


def throughput(row: dict[str, Any]) -> dict[str, Any]:
    import torch
    from env_throughput import eager_pairs, head_to_head

    torch.set_num_threads(1)
    pairs = eager_pairs("cpu")
    measured = {name: head_to_head(*pairs[name], row["repeats"], row["min_time_s"]) for name in row["figures"]}
    return {"figures": {name: m["ratio"] for name, m in measured.items()}, "pairs": measured}


def read_stored(path: Path) -> dict[str, Any] | None:
    """The stored figures of ``path``; None, after one line on stderr saying what is wrong, when it is missing,
    not JSON or has no ``rows``.
    """
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        why = f"cannot be read ({exc.strerror or exc})"
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
        why = f"is not JSON ({' '.join(str(exc).split())})"
    else:
        if isinstance(stored, dict) and isinstance(stored.get("rows"), dict):
            return stored
        why = "has no \"rows\" mapping"
    print(f"error: --stored {path} {why}; expected stored figures such as {STORED.relative_to(ROOT)} (its "
          "\"rows\" by name)", file=sys.stderr)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", default=None, help="rows to run (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="training runs at once (one torch thread each)")
    parser.add_argument("--stored", type=Path, default=STORED, help="the stored figures")
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--update", action="store_true", help="store the measured figures (a move made on purpose)")
    store.add_argument("--add-machine", action="store_true",
                       help="store this CPU's figures beside the others (its runs take another path at the same code)")
    args = parser.parse_args()
    from mbpo.run.provenance import code_version, machine

    stored = read_stored(args.stored)
    if stored is None:
        return 2
    names = args.only or list(stored["rows"])
    unknown = sorted(set(names) - set(stored["rows"]))
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(stored['rows'])}")
    here = {k: machine()[k] for k in ("cpu", "cpu_flags")}
    commit = code_version()["commit"]  # the code the runs start from
    training = [(name, seed) for name in names if "seeds" in stored["rows"][name]
                for seed in stored["rows"][name]["seeds"]]
    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        runs = list(pool.map(lambda job: (job[0], train(stored["rows"][job[0]], job[1])), training))
    result: dict[str, Any] = {"benchmark": "headlines", "machine": here, "rows": {}}
    failed = [f"{name} seed {run['seed']}: {run['error']}" for name, run in runs if "error" in run]
    for name in names:
        row = stored["rows"][name]
        if "seeds" in row:
            seed_runs = [run for n, run in runs if n == name]
            if any("error" in run for run in seed_runs):
                continue
            measured = steps_figures({run["seed"]: run["steps"] for run in seed_runs})
            detail: dict[str, Any] = {"runs": seed_runs}
        else:
            out = throughput(row)
            measured, detail = out["figures"], {"pairs": out["pairs"]}
        figures, same_cpu = reference(row, here)
        result["rows"][name] = {"measured": measured, "stored": figures, "same_cpu": same_cpu,
                                "moved": compare(row, measured, same_cpu, figures), **detail}
    result["moved"] = [name for name, r in result["rows"].items() if r["moved"]]
    if failed:
        result["failed"] = failed
    written: list[str] = []
    if (args.update or args.add_machine) and not failed:
        on = {**here, "date": time.strftime("%Y-%m-%d"), "commit": commit}
        for name, r in result["rows"].items():
            row = stored["rows"][name]
            if args.update:
                row.update(figures=r["measured"], measured_on=on)
                row.pop("on_other_machines", None)  # measured at the code before the move
            elif not same_machine(row["measured_on"], here):
                others = [o for o in row.get("on_other_machines", []) if not same_machine(o, here)]
                row["on_other_machines"] = [*others, {**on, "figures": r["measured"]}]
            else:
                continue
            written.append(name)
        args.stored.write_text(json.dumps(stored, indent=2) + "\n")
    print(json.dumps(result))
    return 2 if failed else 1 if set(result["moved"]) - set(written) else 0


if __name__ == "__main__":
    sys.exit(main())
