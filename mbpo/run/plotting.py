"""``python -m mbpo plot RUN_DIR [RUN_DIR ...]``: evaluation curves of one or several runs on one chart.

Runs whose configs differ only in ``seed`` (and run length or cadence) are one
curve: the median over seeds, with a band from the lowest to the highest. The
legend comes from each run's config (env, agent, MBPO or not, seeds); a run
dir written by something else (a peer's baseline) can name itself with a
``run.json`` holding ``label`` (and ``seed``).

MBPO runs also get :func:`plot_model_health`: the model's errors on real data it
has not trained on, open-loop at 1 and 5 steps, how rollouts end beside the real
termination rate, and the critic's bias (mbpo.model_based.health, mbpo.run.evaluation).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from mbpo.errors import MbpoError
from mbpo.run.metrics import read_metrics

__all__ = ["plot_learning_curve", "plot_runs", "plot_model_health", "curves", "run_label", "X_AXES", "HEALTH_PANELS"]

X_AXES = ("env_steps", "wall_s")
HEALTH_PANELS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("one-step error on new real data (normalised MSE)", ("model_err_delta", "model_err_reward"), True),
    ("open-loop state error along real trajectories", ("model_open_loop_err_1", "model_open_loop_err_5"), True),
    ("terminations and dropped branches", ("real_termination_rate", "rollout_termination_rate",
                                           "model_err_termination", "rollout_nonfinite_frac"), False),
    ("critic bias at evaluation start states (Q - MC return)", ("q_bias", "q_bias_reward"), False),
)
"""``(title, metrics.csv columns, log scale)`` of the model-health chart's panels."""


def run_label(run_dir: Path) -> tuple[str, int | None]:
    """``(curve label, seed)`` of a run dir: from its config.yaml, else from ``label`` in its run.json."""
    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        from mbpo.config import config_from_yaml, updates_per_transition

        cfg = config_from_yaml(config_path.read_text())
        extra = "" if cfg.agent.name == "dqn" else f", utd {updates_per_transition(cfg):g}{critic_label(cfg)}"
        extra += ", sync trainer" if cfg.trainer == "sync" else ""
        extra += model_label(cfg)
        return f"{cfg.env.id} {'MBPO-' if cfg.model.enabled else ''}{cfg.agent.name.upper()}{extra}", cfg.seed
    try:
        info: dict[str, Any] = json.loads((run_dir / "run.json").read_text())
        return str(info["label"]), info.get("seed")
    except (OSError, ValueError, KeyError):
        raise MbpoError(f"{run_dir} has neither a config.yaml nor a run.json with a label; expected a run dir "
                        "written by `python -m mbpo train` (or one that names itself in run.json)") from None


def critic_label(cfg: Any) -> str:
    """SAC's critic options as a label suffix (empty for SAC's own twin critics), so curves of different critics
    never merge into one.
    """
    sac = cfg.agent.sac
    parts = []
    if sac.crossq:
        parts.append("CrossQ")
    if sac.num_critics != 2 or sac.num_min is not None:
        parts.append(f"{sac.num_critics} critics, min of {sac.num_min or sac.num_critics}, actor on {sac.actor_q}")
    if sac.dropout > 0:
        parts.append(f"dropout {sac.dropout:g}")
    if sac.layer_norm:
        parts.append("LayerNorm")
    if sac.policy_delay > 1:
        parts.append(f"policy delay {sac.policy_delay}")
    return f" ({'; '.join(parts)})" if parts else ""


def model_label(cfg: Any) -> str:
    """The model-side options that change what the learner is fed, as a label suffix (empty for MBPO's own), so
    a masked or a half-real run never merges into the plain MBPO curve.
    """
    from mbpo.config import ModelConfig

    m, default = cfg.model, ModelConfig()
    if not m.enabled:
        return ""
    parts = []
    if m.rollout_keep_fraction < 1:
        parts.append(f"masking {m.rollout_keep_fraction:g}")
    if m.real_ratio != default.real_ratio:
        parts.append(f"real_ratio {m.real_ratio:g}")
    if m.nll_beta:
        parts.append(f"beta-NLL {m.nll_beta:g}")
    return f" [{'; '.join(parts)}]" if parts else ""


def _curve(run_dir: Path, x: str, y: str = "eval_return") -> list[tuple[float, float]]:
    """The ``(x, y)`` points of a run; none for a dir without a metrics.csv (a run that never started)."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return []
    return [(float(r[x]), float(r[y])) for r in read_metrics(path) if r.get(y) and r.get(x)]


def curves(run_dirs: list[str | Path], x: str = "env_steps", y: str = "eval_return") -> dict[str, dict[str, Any]]:
    """Per curve label: ``x``, ``median``, ``low``, ``high`` of column ``y`` (over seeds, aligned by row index
    among the rows that have ``y``) and ``seeds``. Runs that differ only in their seed share a label, so they
    make one curve.
    """
    if x not in X_AXES:
        raise MbpoError(f"--x {x!r} is not allowed; expected one of {', '.join(X_AXES)}")
    if not run_dirs:
        raise MbpoError("plot needs at least one run dir")
    groups: dict[str, list[list[tuple[float, float]]]] = defaultdict(list)
    seeds: dict[str, list[Any]] = defaultdict(list)
    for run_dir in map(Path, run_dirs):
        if not run_dir.is_dir():
            raise MbpoError(f"{run_dir} is not a directory; expected run dirs written by `python -m mbpo train`")
        points = _curve(run_dir, x, y)
        if points:  # a run that failed to start, or has not evaluated yet, has none
            label, seed = run_label(run_dir)
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
    empty = [str(d) for d in run_dirs if not _curve(Path(d), x)]
    if not data:
        raise MbpoError(f"no evaluations yet in {', '.join(empty)}: plot a run once it has evaluated (every "
                        "eval_every env steps)")
    for run_dir in empty:
        print(f"[mbpo] plot: passed over {run_dir}: no evaluations yet", file=sys.stderr)
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


def plot_model_health(run_dirs: list[str | Path], out: str | Path, x: str = "env_steps") -> Path | None:
    """The model-health chart (:data:`HEALTH_PANELS`) of the runs that log it, median over seeds per curve;
    None (nothing written) when no run does (no MBPO run among them).
    """
    panels = [(title, [(col, curves(run_dirs, x, col)) for col in cols], log) for title, cols, log in HEALTH_PANELS]
    if not any(data for _, lines, _ in panels[:3] for _, data in lines):
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    for ax, (title, lines, log) in zip(axes.flat, panels, strict=True):
        for col, data in lines:
            for label, c in data.items():
                ax.plot(c["x"], c["median"], "-", lw=1.2, label=f"{col} ({label})" if len(data) > 1 else col)
        if log and any(data for _, data in lines):
            ax.set_yscale("log")
        if not log:
            ax.axhline(0.0, color="grey", lw=0.6)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("env steps" if x == "env_steps" else "wall-clock (s)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110, bbox_inches="tight")
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
