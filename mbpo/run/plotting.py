"""``python -m mbpo plot RUN_DIR [RUN_DIR ...]``: evaluation curves of one or several runs on one chart.

Runs whose configs differ only in ``seed`` (and run length) are one curve: the
median over seeds, with a band from the lowest to the highest. The
legend comes from each run's config (env, agent, MBPO or not, seeds); a run
dir written by something else (a peer's baseline) can name itself with a
``run.json`` holding ``label`` (and ``seed``).

MBPO runs also get :func:`plot_model_health`: the model's errors on real data it
has not trained on, open-loop at 1 and 5 steps, how rollouts end beside the real
termination rate, and the critic's bias (mbpo.model_based.health, mbpo.run.evaluation).
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mbpo.errors import MbpoError
from mbpo.run.metrics import note_passed_over, read_runs
from mbpo.run.out_path import output_file_problem

__all__ = ["plot_learning_curve", "plot_runs", "plot_model_health", "curves", "run_label", "describe_run", "load_runs",
           "plottable",
           "check_out", "check_run_dirs", "default_out", "Run", "X_AXES", "HEALTH_PANELS"]

X_AXES = ("env_steps", "wall_s")
HEALTH_PANELS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("one-step error on new real data (normalised MSE)", ("model_err_delta", "model_err_reward"), True),
    ("open-loop state error along real trajectories", ("model_open_loop_err_1", "model_open_loop_err_5"), True),
    ("terminations and dropped branches", ("real_termination_rate", "rollout_termination_rate",
                                           "model_err_termination", "rollout_nonfinite_frac"), False),
    ("critic bias at evaluation start states (Q - MC return)", ("q_bias", "q_bias_reward"), False),
)
"""``(title, metrics.csv columns, log scale)`` of the model-health chart's panels."""
EMPTY_PANEL = {"open-loop state error along real trajectories":
               "needs 5 consecutive steps of one env between two model fits: a run with many envs per fit has none"}
"""Why a panel can have no values in an MBPO run's metrics.csv (said in the panel, and once on stderr)."""
NOTE = "[mbpo] plot:"


@dataclass(frozen=True)
class Run:
    """A run dir ready to draw: its complete metrics rows (mbpo.run.metrics.read_metrics), curve label and seed."""

    path: Path
    rows: list[dict[str, str]]
    label: str
    seed: int | None
    settings: tuple[tuple[str, str], ...] = ()
    """Every config key that makes the run what it is but its seed, and its evaluation cadence (flattened
    ``key=value`` pairs; empty for a run dir that names itself in run.json): runs share a curve only when these
    match too, whatever the label says."""


RunDirs = Sequence[str | Path] | Sequence[Run]


def run_label(run_dir: Path) -> tuple[str, int | None]:
    """``(curve label, seed)`` of a run dir: from its config.yaml, else from ``label`` in its run.json."""
    run = describe_run(run_dir, [])
    return run.label, run.seed


def describe_run(run_dir: Path, rows: list[dict[str, str]]) -> Run:
    """A run dir with its ``rows``, described by its config.yaml (label, seed, settings, cadence), else by
    ``label`` (and ``seed``) in its run.json: a run of another tool, whose config.yaml (if any) is not ours.
    """
    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        from mbpo.config import config_from_yaml, updates_per_transition
        from mbpo.run.run_dir import settings_data

        try:
            text = config_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise MbpoError(f"{config_path} cannot be read as text ({exc}); expected the config.yaml the run "
                            "was started with") from None
        try:
            cfg = config_from_yaml(text, source=str(config_path))
        except MbpoError:
            named = _named_in_run_json(run_dir, rows) if _foreign(text) else None
            if named is None:  # ours, damaged: passed over by name
                raise
            return named
        extra = "" if cfg.agent.name == "dqn" else f", utd {updates_per_transition(cfg):g}{critic_label(cfg)}"
        extra += ", sync trainer" if cfg.trainer == "sync" else ""
        extra += model_label(cfg)
        label = f"{cfg.env.id} {'MBPO-' if cfg.model.enabled else ''}{cfg.agent.name.upper()}{extra}"
        settings = tuple((k, v) for k, v in _flat({**settings_data(cfg), "eval_every": cfg.eval_every})
                         if k != "seed")
        return Run(run_dir, rows, label, cfg.seed, settings)
    named = _named_in_run_json(run_dir, rows)
    if named is None:
        raise MbpoError(f"{run_dir} has neither a config.yaml nor a run.json with a label; expected a run dir "
                        "written by `python -m mbpo train` (or one that names itself in run.json)")
    return named


def _foreign(config_text: str) -> bool:
    """A config.yaml of another tool: a YAML mapping with none of our config's top-level keys."""
    import dataclasses

    import yaml

    from mbpo.config import Config

    try:
        data = yaml.safe_load(config_text)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and not set(data) & {f.name for f in dataclasses.fields(Config)}


def _named_in_run_json(run_dir: Path, rows: list[dict[str, str]]) -> Run | None:
    """The run as its run.json names it (``label``, ``seed``), or None where it does not."""
    try:
        info: dict[str, Any] = json.loads((run_dir / "run.json").read_text())
        return Run(run_dir, rows, str(info["label"]), info.get("seed"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _flat(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(data, dict):
        return [pair for key, value in sorted(data.items()) for pair in _flat(value, f"{prefix}{key}.")]
    return [(prefix[:-1], json.dumps(data))]


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
    elif sac.actor_q != "min":
        parts.append(f"actor on {sac.actor_q}")
    if sac.dropout > 0:
        parts.append(f"dropout {sac.dropout:g}")
    if sac.layer_norm:
        parts.append("LayerNorm")
    if sac.policy_delay > 1:
        parts.append(f"policy delay {sac.policy_delay}")
    if sac.weight_init != "default":
        parts.append(f"{sac.weight_init} init")
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
    if m.macura:
        parts.append(f"MACURA quantile {m.macura_quantile:g} x {m.macura_scale:g}")
    if m.real_ratio != default.real_ratio:
        parts.append(f"real_ratio {m.real_ratio:g}")
    if m.nll_beta:
        parts.append(f"beta-NLL {m.nll_beta:g}")
    return f" [{'; '.join(parts)}]" if parts else ""


def load_runs(run_dirs: Sequence[str | Path], column: str | None = "eval_return") -> tuple[list[Run], dict[Path, str]]:
    """The runs of ``run_dirs`` that can be drawn (a readable metrics.csv with a ``column`` value, any row for
    None; a label), in order, and why each other one was passed over (:func:`mbpo.run.metrics.read_runs`, or
    its config.yaml or run.json). A path that is not a directory is an error: a typo, not a run in progress.
    """
    paths = _once([Path(d) for d in run_dirs])
    check_run_dirs(paths)
    read, passed = read_runs(paths, column)
    runs = []
    for run_dir in paths:
        if run_dir not in read:
            continue
        try:
            runs.append(describe_run(run_dir, read[run_dir]))
        except MbpoError as exc:
            passed[run_dir] = f"unreadable: {' '.join(str(exc).split())}"
    return runs, {d: passed[d] for d in paths if d in passed}


def _once(paths: list[Path]) -> list[Path]:
    """Each run dir once (overlapping globs name one twice: it would count as two seeds), with a note."""
    seen: dict[Path, list[Path]] = {}
    for path in paths:
        seen.setdefault(path.resolve(), []).append(path)
    for given in seen.values():
        if len(given) > 1:
            print(f"{NOTE} {given[0]} was given {len(given)} times: one run, drawn once", file=sys.stderr)
    return [given[0] for given in seen.values()]


def check_run_dirs(run_dirs: list[Path]) -> None:
    """A path that is not a directory is an error: a typo, not a run in progress."""
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise MbpoError(f"{run_dir} is not a directory; expected run dirs written by `python -m mbpo train`")


def plottable(run_dirs: RunDirs) -> list[Run]:
    """The runs of ``run_dirs`` with evaluations to draw; each other one is passed over with a one-line note on
    stderr naming it and why. None at all is an MbpoError naming each run and why (one line).
    """
    if not run_dirs:
        raise MbpoError("plot needs at least one run dir")
    if all(isinstance(r, Run) for r in run_dirs):
        return [r for r in run_dirs if isinstance(r, Run)]
    runs, passed = load_runs([r.path if isinstance(r, Run) else r for r in run_dirs])
    if not runs:
        if all(why.startswith("no evaluations yet") for why in passed.values()):
            raise MbpoError(f"no evaluations yet in {', '.join(map(str, passed))}: plot a run once it has "
                            "evaluated (every eval_every env steps)")
        raise MbpoError("no run to plot: " + "; ".join(f"{d}: {why}" for d, why in passed.items()))
    note_passed_over(NOTE, passed)
    return runs


def _as_runs(run_dirs: RunDirs) -> list[Run]:
    """Runs as they are; run dirs loaded, any row counting, each one passed over noted on stderr."""
    if all(isinstance(r, Run) for r in run_dirs):
        return [r for r in run_dirs if isinstance(r, Run)]
    runs, passed = load_runs([r.path if isinstance(r, Run) else r for r in run_dirs], column=None)
    note_passed_over(NOTE, passed)
    return runs


def _points(run: Run, x: str, y: str) -> list[tuple[float, float, float]]:
    """``(env_steps, x, y)`` of each row that has ``x`` and ``y``."""
    return [(float(r["env_steps"]), float(r[x]), float(r[y])) for r in run.rows
            if r.get(y) and r.get(x) and r.get("env_steps")]


def _aligned(each: list[list[tuple[float, float, float]]]) -> list[list[tuple[float, float]]]:
    """The runs' points matched by env step to a grid, the evaluations of the run that got furthest: a point joins
    the grid point nearest to it within half the grid's spacing there (one per run), so seeds meet at the same
    env steps whatever their cadence (a resume may change ``eval_every``) and a run still in progress adds to the
    points it has reached only. Per grid point, the ``(x, y)`` of the runs that have it.
    """
    grid = [p[0] for p in max(each, key=lambda points: (points[-1][0], len(points)))]
    matched: list[list[tuple[float, float]]] = [[] for _ in grid]
    for points in each:
        best: dict[int, tuple[float, float, float]] = {}  # grid index -> (distance, x, y), the nearest of this run
        for steps, x, y in points:
            i = min(bisect.bisect_left(grid, steps), len(grid) - 1)
            if i > 0 and steps - grid[i - 1] <= grid[i] - steps:
                i -= 1
            left = grid[i] - grid[i - 1] if i > 0 else math.inf
            right = grid[i + 1] - grid[i] if i + 1 < len(grid) else math.inf
            tolerance = min(left, right) / 2  # inf for a grid of one point
            distance = abs(steps - grid[i])
            if distance <= tolerance and (i not in best or distance < best[i][0]):
                best[i] = (distance, x, y)
        for i, (_, x, y) in best.items():
            matched[i].append((x, y))
    return matched


def curves(run_dirs: RunDirs, x: str = "env_steps", y: str = "eval_return") -> dict[str, dict[str, Any]]:
    """Per curve label: ``x``, ``median``, ``low``, ``high`` of column ``y`` over the seeds at each point (the runs'
    evaluations matched by env step: :func:`_aligned`), ``values`` (each point's values, one per seed that has it:
    for other statistics), ``counts`` (how many seeds each point has) and ``seeds``. Runs whose settings differ
    only in their seed make one curve; runs with one label but other settings get curves of their own, each label
    then naming the keys where they differ. Run dirs that cannot be drawn are passed over with a note
    (:func:`load_runs`).
    """
    if x not in X_AXES:
        raise MbpoError(f"--x {x!r} is not allowed; expected one of {', '.join(X_AXES)}")
    if not run_dirs:
        raise MbpoError("plot needs at least one run dir")
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[Run]] = defaultdict(list)
    for run in _as_runs(run_dirs):
        if _points(run, x, y):  # a run that has not evaluated yet, or does not log ``y``, has none
            groups[(run.label, run.settings)].append(run)
    out: dict[str, dict[str, Any]] = {}
    for (label, settings), runs in groups.items():
        twins = [other for other in groups if other[0] == label]
        if len(twins) > 1:
            label = f"{label} [{_differences(settings, [t[1] for t in twins if t[1] != settings])}]"
        points = _aligned([_points(r, x, y) for r in runs])
        ys = [[y_ for _, y_ in p] for p in points]
        out[label] = {"x": [statistics.median(x_ for x_, _ in p) for p in points],
                      "median": [statistics.median(v) for v in ys], "low": [min(v) for v in ys],
                      "high": [max(v) for v in ys], "values": ys, "counts": [len(v) for v in ys],
                      "seeds": [r.seed for r in runs]}
    return out


def _differences(settings: tuple[tuple[str, str], ...], others: list[tuple[tuple[str, str], ...]],
                 most: int = 4) -> str:
    """The ``key=value`` pairs of ``settings`` that some other settings do not share (at most ``most``)."""
    shared = set.intersection(*(set(o) for o in others)) if others else set()
    differ = [f"{k}={v}" for k, v in settings if (k, v) not in shared]
    return ", ".join(differ[:most]) + (f", +{len(differ) - most} more" if len(differ) > most else "")


def plot_runs(run_dirs: RunDirs, out: str | Path | None = None, x: str = "env_steps",
              title: str | None = None) -> Path:
    """Write the chart of :func:`curves` (default: ``RUN_DIR/learning_curve.png`` for one run,
    ``learning_curves.png`` here for several; the format follows ``out``'s extension); return its path.
    Runs without evaluations or unreadable are passed over with a note (:func:`plottable`).
    """
    if x not in X_AXES:
        raise MbpoError(f"--x {x!r} is not allowed; expected one of {', '.join(X_AXES)}")
    plt = _pyplot()
    if out is not None:
        check_out(Path(out))
    runs = plottable(run_dirs)
    data = curves(runs, x)
    if not data:
        raise MbpoError(f"no evaluation with {x} in {', '.join(str(r.path) for r in runs)}: nothing to plot against "
                        f"{x}; try --x env_steps")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label, c in data.items():
        k = len(c["seeds"])
        partial = [(xi, n) for xi, n in zip(c["x"], c["counts"], strict=True) if n < k]
        if partial:  # a run in progress, or evaluated at other env steps: those points are the others' only
            print(f"{NOTE} {label}: {len(partial)} of its {len(c['x'])} points have fewer than its {k} seeds (from "
                  f"{partial[0][0]:,.0f} on: {partial[0][1]} of {k}); a run still in progress, or evaluated at other "
                  "env steps", file=sys.stderr)
        line, = ax.plot(c["x"], c["median"], "o-", ms=3, label=f"{label} ({k} seed{'s' if k > 1 else ''})")
        if k > 1:
            ax.fill_between(c["x"], c["low"], c["high"], color=line.get_color(), alpha=0.2)
    ax.set_xlabel("env steps" if x == "env_steps" else "wall-clock (s)")
    ax.set_ylabel("evaluation return")
    ax.set_title(title or (runs[0].path.name if len(runs) == 1 else "median and range over seeds"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    out = default_out(run_dirs) if out is None else Path(out)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def default_out(run_dirs: RunDirs) -> Path:
    """``RUN_DIR/learning_curve.png`` for one run, ``learning_curves.png`` here for several."""
    if len(run_dirs) != 1:
        return Path("learning_curves.png")
    first = run_dirs[0]
    return (first.path if isinstance(first, Run) else Path(first)) / "learning_curve.png"


def check_out(out: Path) -> None:
    """An output path matplotlib can write: a file in a writable folder, its extension a format it knows
    (checked before any run is read, so a typo costs nothing).
    """
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    problem = output_file_problem(out)
    if problem is not None:
        raise MbpoError(f"--out {out}: {problem}")
    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix.lower().lstrip(".") not in formats:
        raise MbpoError(f"--out {out}: {f'unknown image format {out.suffix!r}' if out.suffix else 'no extension'}; "
                        f"expected one of {', '.join('.' + f for f in sorted(formats))}")


def plot_model_health(run_dirs: RunDirs, out: str | Path, x: str = "env_steps") -> Path | None:
    """The model-health chart (:data:`HEALTH_PANELS`) of the runs that log it, median over seeds per curve;
    None (nothing written) when no run does (no MBPO run among them).
    """
    runs = _as_runs(run_dirs)  # read once, noted once
    if not runs:
        return None
    panels = [(title, [(col, curves(runs, x, col)) for col in cols], log) for title, cols, log in HEALTH_PANELS]
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
        if any(data for _, data in lines):
            ax.legend(fontsize=7)
        else:  # an empty panel says why, not a matplotlib warning about a legend without lines
            why = EMPTY_PANEL.get(title, "not logged by these runs")
            ax.text(0.5, 0.5, f"no values: {why}", ha="center", va="center", fontsize=8, wrap=True,
                    transform=ax.transAxes)
            print(f"{NOTE} {title}: no values in these runs ({why})", file=sys.stderr)
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
