"""Where a run's numbers go: ``metrics.csv``, TensorBoard (if installed) and a tqdm bar.

``metrics.csv`` always has the columns ``env_steps, updates, wall_s,
train_return, eval_return`` first (empty where nothing was measured), then any
other metric in the order it first appeared. TensorBoard event files are
written through torchrl's ``TensorboardLogger`` when ``tensorboard`` imports (a resume purges the events after
its checkpoint, as it drops those rows).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import math
import sys
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from mbpo.errors import MbpoError, RunFailedError

__all__ = ["MetricsLogger", "RunDirRemovedError", "BASE_COLUMNS", "REQUIRED_COLUMNS", "UnreadableMetricsError",
           "read_metrics", "eval_curve", "read_runs", "note_passed_over"]

BASE_COLUMNS = ["env_steps", "updates", "wall_s", "train_return", "eval_return"]
REQUIRED_COLUMNS = ("env_steps", "eval_return")
"""The columns without which a CSV is not a metrics.csv of a run (every writer of one, ours or a peer's
baseline through :class:`MetricsLogger`, has them)."""


class UnreadableMetricsError(MbpoError):
    """A metrics.csv that cannot be read as one: not text, not ours, or damaged in the middle."""


def read_metrics(path: str | Path) -> list[dict[str, str]]:
    """The complete rows of a metrics.csv, also of a run that is still writing it.

    A last row cut mid-write (the file does not end in a newline, or the row is short of fields) is left out,
    so no reader takes a cut value (``-14`` of ``-1457.4``) for a measurement; so are NUL bytes that end the file
    (what a power loss leaves of a last write); a header alone is no rows.
    Raises :class:`UnreadableMetricsError`, naming the file and what is wrong, for a file that is not text,
    lacks :data:`REQUIRED_COLUMNS` (some other CSV), has a row with the wrong number of fields before its
    last, or a :data:`BASE_COLUMNS` cell that is not a number.
    """
    path = Path(path)
    not_text = UnreadableMetricsError(f"{path} is not a text CSV (binary or damaged); expected the metrics.csv "
                                      "that `python -m mbpo train` writes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise not_text from None
    except OSError as exc:
        raise UnreadableMetricsError(f"{path} cannot be read ({exc.strerror or exc})") from None
    cut = text.rstrip("\0")  # a power loss can leave the last block zeroed: a cut tail, as a cut row is
    if "\0" in cut or (text and not cut):  # NULs in the middle, or nothing else (not even a header): damaged
        raise not_text
    text = cut
    try:
        table = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error:
        raise not_text from None
    if not table:
        return []  # created, nothing written yet
    header = table[0]
    rows = [(i, cells) for i, cells in enumerate(table[1:], start=2) if cells]  # a blank line is no row
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise UnreadableMetricsError(f"{path} has no {' and no '.join(missing)} column (header: "
                                     f"{','.join(header)[:80]}); expected the metrics.csv of an mbpo run")
    if rows and (not text.endswith("\n") or len(rows[-1][1]) < len(header)):
        rows.pop()  # cut mid-write: the writer appends whole lines, each ending in a newline
    out = []
    for i, cells in rows:
        if len(cells) != len(header):
            raise UnreadableMetricsError(f"{path} line {i} has {len(cells)} fields; expected {len(header)}, one "
                                         "per header column")
        row = dict(zip(header, cells, strict=True))
        for column in BASE_COLUMNS:  # empty where nothing was measured; env_steps never is
            if (row.get(column) or column == "env_steps") and not _is_number(row[column], column == "env_steps"):
                raise UnreadableMetricsError(f"{path} line {i}: {column} {row[column][:20]!r} is not a number; "
                                             f"expected {'an integer' if column == 'env_steps' else 'a number'}")
        out.append(row)
    return out


def eval_curve(path: str | Path) -> list[tuple[int, float]]:
    """``(env_steps, eval_return)`` of every evaluated row of a metrics.csv, in order."""
    return [(int(r["env_steps"]), float(r["eval_return"])) for r in read_metrics(path) if r["eval_return"]]


def read_runs(run_dirs: Iterable[str | Path], column: str | None = "eval_return",
              ) -> tuple[dict[Path, list[dict[str, str]]], dict[Path, str]]:
    """The rows of each run dir whose metrics.csv reads and has a ``column`` value (any row, for None), and
    why each other one was passed over: nothing yet (``no evaluations yet``; a run starting or one that
    never did) or the reason it is unreadable. Every tool that reads run dirs goes through it, so a run in
    progress or a damaged one is named and skipped instead of ending the tool.
    """
    nothing = {"eval_return": "no evaluations yet", None: "no rows yet"}.get(column, f"no {column} yet")
    read: dict[Path, list[dict[str, str]]] = {}
    passed: dict[Path, str] = {}
    for run_dir in map(Path, run_dirs):
        path = run_dir / "metrics.csv"
        if not path.is_file():
            inside = sorted(d.name for d in run_dir.glob("*/") if (d / "metrics.csv").is_file())
            passed[run_dir] = (f"it holds {len(inside)} run dir(s), not a run ({', '.join(inside[:3])}"
                               f"{', ...' if len(inside) > 3 else ''}): name them, e.g. {run_dir / '*'}" if inside
                               else f"{nothing} (no metrics.csv)")
            continue
        try:
            rows = read_metrics(path)
        except UnreadableMetricsError as exc:
            passed[run_dir] = f"unreadable: {exc}"
            continue
        if not any(column is None or r.get(column) for r in rows):
            passed[run_dir] = nothing
        else:
            read[run_dir] = rows
    return read, passed


def note_passed_over(prefix: str, passed: dict[Path, str]) -> None:
    """One line on stderr per run dir a tool passed over, naming it and why (``prefix`` names the tool)."""
    for run_dir, why in passed.items():
        print(f"{prefix} passed over {run_dir}: {why}", file=sys.stderr)


def _is_number(text: str, integer: bool) -> bool:
    try:
        int(text) if integer else float(text)
    except ValueError:
        return False
    return True


def _tensorboard(run_dir: Path, resume_at: int | None) -> Any:
    """torchrl's ``TensorboardLogger`` writing to ``run_dir/tb``; a resumed run's writer purges the events logged
    after ``resume_at`` (``SummaryWriter(purge_step=...)``), as metrics.csv drops those rows: TensorBoard then
    shows each step once, not the cut-off run's steps and the resume's twice.
    """
    from torch.utils.tensorboard import SummaryWriter
    from torchrl.record.loggers import TensorboardLogger

    class ResumedTensorboardLogger(TensorboardLogger):
        def _create_experiment(self) -> SummaryWriter:
            purge_step = None if resume_at is None else resume_at + 1
            return SummaryWriter(log_dir=str(Path(self.log_dir) / self.exp_name), purge_step=purge_step)

    return ResumedTensorboardLogger(exp_name="tb", log_dir=str(run_dir))


class RunDirRemovedError(RunFailedError):
    """The run dir was removed while the run ran: nothing more can be recorded there (and it is not made again,
    which would leave a run dir holding only the rows written after the removal).
    """


class MetricsLogger:
    """Append rows to ``run_dir/metrics.csv``, mirror scalars to TensorBoard, drive the progress bar."""

    def __init__(self, run_dir: str | Path, total_env_steps: int, progress: bool = True, resume_at: int | None = None):
        self.path = Path(run_dir) / "metrics.csv"
        self.path.parent.mkdir(parents=True, exist_ok=True)
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
            self.tensorboard = _tensorboard(Path(run_dir), resume_at)
        tqdm.monitor_interval = 0  # no tqdm_monitor thread: a closed run leaves no thread behind
        self.bar = tqdm(total=total_env_steps, initial=resume_at or 0, unit="step", dynamic_ncols=True,
                        disable=not progress, desc="env steps")

    def log(self, row: dict[str, Any]) -> None:
        """Record one row (keys become columns); non-finite or missing values are written empty."""
        self._check_run_dir()
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
        self._check_run_dir()
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
            try:
                self.tensorboard.experiment.close()  # flushes and stops the event-writer thread
            except FileNotFoundError:  # its events file went with a removed run dir (already said, by log)
                if self.path.parent.is_dir():
                    raise

    def _check_run_dir(self) -> None:
        if not self.path.parent.is_dir():
            raise RunDirRemovedError(f"the run dir {self.path.parent} was removed while the run ran; the run stops, "
                                     "as nothing more can be recorded there (start it again with `python -m mbpo "
                                     "train`)")

    def _mirror(self, row: dict[str, Any]) -> None:
        if self.tensorboard is not None:
            step = int(row["env_steps"])
            for key, value in row.items():
                if key != "env_steps" and isinstance(value, (int, float)):
                    self.tensorboard.log_scalar(key, value, step=step)
            # on disk before the next row (a row is seconds of training): TensorBoard shows it now, and a run dir
            # removed meanwhile is found by the next log, not by the writer thread's traceback
            self.tensorboard.experiment.flush()

    def _rewrite(self) -> None:
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
