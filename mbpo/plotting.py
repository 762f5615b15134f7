"""``python -m mbpo plot RUN_DIR [RUN_DIR ...]``: evaluation curves of one or several runs on one chart.

Runs whose configs differ only in ``seed`` (and run length or cadence) are one
curve: the median over seeds, with a band from the lowest to the highest. The
legend comes from each run's config (env, agent, MBPO or not, seeds); a run
dir written by something else (a peer's baseline) can name itself with a
``run.json`` holding ``label`` (and ``seed``).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from mbpo.errors import MbpoError
from mbpo.metrics import read_metrics

__all__ = ["plot_learning_curve", "plot_runs", "curves", "run_label", "X_AXES"]

X_AXES = ("env_steps", "wall_s")


def run_label(run_dir: Path) -> tuple[str, int | None]:
    """``(curve label, seed)`` of a run dir: from its config.yaml, else from ``label`` in its run.json."""
    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        from mbpo.config import config_from_yaml, updates_per_transition

        cfg = config_from_yaml(config_path.read_text())
        extra = "" if cfg.agent.name == "dqn" else f", utd {updates_per_transition(cfg):g}"
        return f"{cfg.env.id} {'MBPO-' if cfg.model.enabled else ''}{cfg.agent.name.upper()}{extra}", cfg.seed
    try:
        info: dict[str, Any] = json.loads((run_dir / "run.json").read_text())
        return str(info["label"]), info.get("seed")
    except (OSError, ValueError, KeyError):
        raise MbpoError(f"{run_dir} has neither a config.yaml nor a run.json with a label; expected a run dir "
                        "written by `python -m mbpo train` (or one that names itself in run.json)") from None


def _curve(run_dir: Path, x: str) -> list[tuple[float, float]]:
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise MbpoError(f"{path} does not exist; is {run_dir} a run directory?")
    return [(float(r[x]), float(r["eval_return"])) for r in read_metrics(path) if r.get("eval_return") and r.get(x)]


def curves(run_dirs: list[str | Path], x: str = "env_steps") -> dict[str, dict[str, Any]]:
    """Per curve label: ``x``, ``median``, ``low``, ``high`` (over seeds, aligned by evaluation index) and
    ``seeds``. Runs that differ only in their seed share a label, so they make one curve.
    """
    if x not in X_AXES:
        raise MbpoError(f"--x {x!r} is not allowed; expected one of {', '.join(X_AXES)}")
    if not run_dirs:
        raise MbpoError("plot needs at least one run dir")
    groups: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
    seeds: dict[str, list[Any]] = defaultdict(list)
    for run_dir in map(Path, run_dirs):
        label, seed = run_label(run_dir)
        points = _curve(run_dir, x)
        if points:
            groups[label].append(points)
            seeds[label].append(seed)
    out: dict[str, dict[str, Any]] = {}
    for label, runs in groups.items():
        n = min(len(c) for c in runs)
        ys = [[c[i][1] for c in runs] for i in range(n)]
        out[label] = {"x": [statistics.median(c[i][0] for c in runs) for i in range(n)],
                      "median": [statistics.median(v) for v in ys], "low": [min(v) for v in ys],
                      "high": [max(v) for v in ys], "seeds": seeds[label]}
    return out


def plot_runs(run_dirs: list[str | Path], out: str | Path | None = None, x: str = "env_steps",
              title: str | None = None) -> Path:
    """Write the chart of :func:`curves` (default: ``RUN_DIR/learning_curve.png`` for one run,
    ``learning_curves.png`` here for several); return its path.
    """
    data = curves(run_dirs, x)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label, c in data.items():
        k = len(c["seeds"])
        line, = ax.plot(c["x"], c["median"], "o-", ms=3, label=f"{label} ({k} seed{'s' if k > 1 else ''})")
        if k > 1:
            ax.fill_between(c["x"], c["low"], c["high"], color=line.get_color(), alpha=0.2)
    ax.set_xlabel("env steps" if x == "env_steps" else "wall-clock (s)")
    ax.set_ylabel("evaluation return")
    ax.set_title(title or (Path(run_dirs[0]).name if len(run_dirs) == 1 else "median and range over seeds"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if out is None:
        out = Path(run_dirs[0]) / "learning_curve.png" if len(run_dirs) == 1 else Path("learning_curves.png")
    out = Path(out)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def plot_learning_curve(run_dir: str | Path) -> Path:
    """One run's evaluation curve, as ``run_dir/learning_curve.png``."""
    return plot_runs([run_dir])


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MbpoError("plotting needs matplotlib; install it with: pip install -e '.[plots]'") from None
    return plt
