"""The modern model-free learners' published Hopper and Walker2d curves, for benchmarks/locomotion.py's chart.

Reads the per-seed CSVs that dojeon-ai/SimbaV2 publishes (``results/baseline/{redq_utd20,droq_utd20,crossq,
sac}.csv``: gym -v4, 10 seeds, env steps counting the random ones as ours do) from a checkout of that
repository and writes, per method and env, the mean, std (population) and median over seeds at each logged
env step up to 45,000: docs/results/locomotion/published.json. Nothing of SimbaV2 is run or copied but
these numbers. Prints one JSON line with the figures near 33,333 env steps (the table of issue 37).

    python benchmarks/published_curves.py --simbav2 /path/to/SimbaV2 [--out docs/results/locomotion/published.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"redq": ("redq_utd20.csv", "REDQ (20 updates/step)"), "droq": ("droq_utd20.csv", "DroQ (20 updates/step)"),
           "crossq": ("crossq.csv", "CrossQ (1 update/step)"), "sac": ("sac.csv", "SAC (1 update/step)")}
ENVS = {"Hopper-v5": "Hopper-v4", "Walker2d-v5": "Walker2d-v4"}
"""Our env id -> the published one (v4: the same models as v5, with v5's fixes; see docs/benchmarks.md)."""
MAX_STEPS = 45_000


def curves(simbav2: Path) -> dict[str, Any]:
    """``{our env id: {method: {label, source, env_steps, mean, std, median, seeds}}}``."""
    out: dict[str, Any] = {env: {} for env in ENVS}
    for method, (name, label) in METHODS.items():
        path = simbav2 / "results" / "baseline" / name
        with path.open() as f:
            rows = list(csv.DictReader(f))
        for ours, theirs in ENVS.items():
            by_step: dict[float, list[float]] = defaultdict(list)
            for r in rows:
                if r["env_name"] == theirs and r["metric"] == "avg_return" and float(r["env_step"]) <= MAX_STEPS:
                    by_step[float(r["env_step"])].append(float(r["value"]))
            steps = sorted(by_step)
            out[ours][method] = {
                "label": f"{label}, published ({theirs})",
                "source": f"dojeon-ai/SimbaV2 results/baseline/{name}",
                "env_steps": [int(s) for s in steps],
                "mean": [round(statistics.fmean(by_step[s]), 1) for s in steps],
                "std": [round(statistics.pstdev(by_step[s]), 1) for s in steps],
                "median": [round(statistics.median(by_step[s]), 1) for s in steps],
                "seeds": [len(by_step[s]) for s in steps],
            }
    return out


def near(curve: dict[str, Any], env_steps: int) -> dict[str, float] | None:
    """The published point nearest ``env_steps`` (within 2,000 steps), or None."""
    if not curve["env_steps"]:
        return None
    i = min(range(len(curve["env_steps"])), key=lambda j: abs(curve["env_steps"][j] - env_steps))
    if abs(curve["env_steps"][i] - env_steps) > 2_000:
        return None
    return {k: curve[k][i] for k in ("env_steps", "mean", "std", "median")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simbav2", type=Path, required=True, help="a checkout of dojeon-ai/SimbaV2")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "locomotion" / "published.json")
    args = parser.parse_args()
    data = curves(args.simbav2)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({"benchmark": "published_curves", "out": str(args.out),
                      "near_33333": {env: {m: near(c, 33_333) for m, c in methods.items()}
                                     for env, methods in data.items()}}))


if __name__ == "__main__":
    main()
