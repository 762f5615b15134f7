"""Where a run's numbers go: ``metrics.csv``, TensorBoard (if installed) and a tqdm bar.

``metrics.csv`` always has the columns ``env_steps, updates, wall_s,
train_return, eval_return`` first (empty where nothing was measured), then any
other metric in the order it first appeared. TensorBoard event files are
written through torchrl's ``TensorboardLogger`` when ``tensorboard`` imports.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from tqdm import tqdm

__all__ = ["MetricsLogger", "BASE_COLUMNS", "read_metrics", "eval_curve"]

BASE_COLUMNS = ["env_steps", "updates", "wall_s", "train_return", "eval_return"]


def read_metrics(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def eval_curve(path: str | Path) -> list[tuple[int, float]]:
    """``(env_steps, eval_return)`` of every evaluated row of a metrics.csv, in order."""
    return [(int(r["env_steps"]), float(r["eval_return"])) for r in read_metrics(path) if r["eval_return"]]


class MetricsLogger:
    """Append rows to ``run_dir/metrics.csv``, mirror scalars to TensorBoard, drive the progress bar."""

    def __init__(self, run_dir: str | Path, total_env_steps: int, progress: bool = True, resume_at: int | None = None):
        self.path = Path(run_dir) / "metrics.csv"
        self.columns = list(BASE_COLUMNS)
        self.rows: list[dict[str, Any]] = []
        if resume_at is not None and self.path.exists():
            # Rows written after the checkpoint we resume from will be produced again.
            self.rows = [r for r in read_metrics(self.path) if int(r["env_steps"]) <= resume_at]
            for row in self.rows:
                self.columns += [k for k in row if k not in self.columns]
        self._rewrite()
        self.tensorboard = None
        if importlib.util.find_spec("tensorboard") is not None:
            from torchrl.record.loggers import TensorboardLogger

            self.tensorboard = TensorboardLogger(exp_name="tb", log_dir=str(run_dir))
        tqdm.monitor_interval = 0  # no tqdm_monitor thread: a closed run leaves no thread behind
        self.bar = tqdm(total=total_env_steps, initial=resume_at or 0, unit="step", dynamic_ncols=True,
                        disable=not progress, desc="env steps")

    def log(self, row: dict[str, Any]) -> None:
        """Record one row (keys become columns); non-finite or missing values are written empty."""
        row = {k: _clean(v) for k, v in row.items()}
        new = [k for k in row if k not in self.columns]
        self.rows.append(row)
        if new:
            self.columns += new
            self._rewrite()
        else:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=self.columns).writerow(row)
        self._mirror(row)

    def amend(self, row: dict[str, Any], interval: Collection[str] = ()) -> None:
        """Update the last row with ``row``'s measured values if both are at the same env step, else log it.

        A resume that finishes the last step's cut work (a model fit) adds to that step's row rather than
        writing a second row for one env step. The ``interval`` columns (rates, time shares) describe the
        resume's few seconds, not the step: the last row keeps its own.
        """
        last = self.rows[-1] if self.rows else None
        if last is None or str(last.get("env_steps")) != str(row.get("env_steps")):
            self.log(row)
            return
        measured = {k: v for k, v in ((k, _clean(v)) for k, v in row.items())
                    if v != "" and k not in interval}
        measured["env_steps"] = row["env_steps"]
        last.update(measured)
        self.columns += [k for k in last if k not in self.columns]
        self._rewrite()
        self._mirror(measured)

    def progress(self, env_steps: int, postfix: dict[str, Any]) -> None:
        self.bar.update(env_steps - self.bar.n)
        self.bar.set_postfix({k: _short(v) for k, v in postfix.items()}, refresh=False)

    def close(self) -> None:
        self.bar.close()
        if self.tensorboard is not None:
            self.tensorboard.experiment.close()  # flushes and stops the event-writer thread

    def _mirror(self, row: dict[str, Any]) -> None:
        if self.tensorboard is not None:
            step = int(row["env_steps"])
            for key, value in row.items():
                if key != "env_steps" and isinstance(value, (int, float)):
                    self.tensorboard.log_scalar(key, value, step=step)

    def _rewrite(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(self.rows)
        tmp.replace(self.path)


def _clean(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return value


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.3e}"
    return str(value)
