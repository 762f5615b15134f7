"""``python -m mbpo plot RUN_DIR``: a learning-curve PNG from the run's metrics.csv."""

from __future__ import annotations

from pathlib import Path

from mbpo.metrics import read_metrics

__all__ = ["plot_learning_curve"]


def plot_learning_curve(run_dir: str | Path) -> Path:
    """Write ``run_dir/learning_curve.png`` (eval and train return against env steps); return its path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit("error: plotting needs matplotlib; install it with: pip install -e '.[plots]'") from exc
    run_dir = Path(run_dir)
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise SystemExit(f"error: {path} does not exist; is {run_dir} a run directory?")
    rows = read_metrics(path)
    fig, ax = plt.subplots(figsize=(7, 4))
    for column, style in (("eval_return", "o-"), ("train_return", "-")):
        points = [(int(r["env_steps"]), float(r[column])) for r in rows if r.get(column)]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, style, label=column.replace("_", " "))
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.set_title(run_dir.name)
    ax.grid(alpha=0.3)
    ax.legend()
    out = run_dir / "learning_curve.png"
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out
