"""Videos of evaluation episodes: frames from ``VecEnv.render`` written by imageio (the ``video`` extra).

MP4 goes through imageio-ffmpeg, whose wheel ships an ffmpeg binary (nothing to install system-wide), and is
streamed to disk frame by frame; GIF goes through Pillow, which keeps every frame until the file is closed (use
it for short clips). The format follows the file's extension.

A recorder is called before each step of an evaluation with the mask of envs still in their first episode, and
draws the state each of them is about to act in: an episode of T steps gives T frames (the state after the last
step is not drawn: the env has already reset). Several envs show side by side in a grid, as SB3's
``VecVideoRecorder`` tiles a vectorized env; an env whose episode is over holds its last frame, dimmed.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import torch

import envs
from mbpo.errors import MbpoError
from mbpo.run.out_path import output_file_problem

__all__ = ["VideoError", "VIDEO_FORMATS", "DEFAULT_FPS", "check_video_path", "EpisodeRecorder", "VideoSummary",
           "EvalVideos", "tile"]

VIDEO_FORMATS = (".mp4", ".gif")
"""File extensions a video may have; the extension picks the format."""
DEFAULT_FPS = 30.0
"""Frames per second for an env that does not say (``VecEnv.render_fps`` None)."""
MIN_GIF_FRAME_MS = 20
"""Shortest GIF frame: viewers show a frame shorter than 20 ms for 100 ms, so a faster env plays slower."""
MACRO_BLOCK = 16
"""H.264 codes 16 x 16 blocks: MP4 frames are padded to a multiple (imageio would rescale them instead)."""
INSTALL = 'pip install -e ".[video]"'


class VideoError(MbpoError):
    """A video cannot be written: a path, a format, a missing extra, or an env that cannot render."""


def check_video_path(path: str | Path) -> Path:
    """``path`` if a video can be written there (a known extension, a file in a writable folder, the writer installed);
    else one VideoError saying what to change. Called before anything is built, so a typo costs nothing.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in VIDEO_FORMATS:
        raise VideoError(f"video path {str(path)!r} has the extension {suffix or '(none)'!r}; expected one of "
                         f"{', '.join(VIDEO_FORMATS)} (the extension picks the format)")
    problem = output_file_problem(path)
    if problem is not None:
        raise VideoError(f"video path {str(path)!r}: {problem}")
    _require_writer(suffix)
    return path


def _require_writer(suffix: str) -> None:
    """The video extra's packages, or one line naming the extra: imageio, and imageio-ffmpeg for MP4."""
    needed = ["imageio"] + (["imageio_ffmpeg"] if suffix == ".mp4" else [])
    missing = [name.replace("_", "-") for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise VideoError(f"writing a {suffix} video needs {' and '.join(missing)}, which "
                         f"{'is' if len(missing) == 1 else 'are'} not installed; install the video extra: {INSTALL}")


@dataclass(frozen=True)
class VideoSummary:
    """What a recorder wrote."""

    path: Path
    frames: int
    height: int
    width: int
    fps: float


def tile(frames: Sequence[np.ndarray]) -> np.ndarray:
    """Frames of one size in a grid of ``ceil(sqrt(n))`` columns, row by row; empty cells black."""
    n = len(frames)
    height, width, channels = frames[0].shape
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    grid = np.zeros((rows * height, cols * width, channels), dtype=np.uint8)
    for i, frame in enumerate(frames):
        r, c = divmod(i, cols)
        grid[r * height:(r + 1) * height, c * width:(c + 1) * width] = frame
    return grid


class EpisodeRecorder:
    """Records the first episode of envs ``env_ids`` of ``env`` to ``path`` during one evaluation; call it before
    each step with the mask of envs still running (``evaluate_episodes(..., frames=recorder)``), then
    :meth:`close` (or use it as a context manager). ``env_ids=None`` records every env, or only env 0 where the
    env renders one view of its batch (``renders_batch``: mjlab, Isaac Lab).
    """

    def __init__(self, env: envs.VecEnv, path: str | Path, env_ids: Sequence[int] | None = None) -> None:
        self.env, self.path = env, Path(path)
        self.suffix = self.path.suffix.lower()
        _require_writer(self.suffix)
        if env_ids is None:
            env_ids = [0] if env.renders_batch else range(env.num_envs)
        self.env_ids = list(env_ids)
        self.fps = float(env.render_fps or DEFAULT_FPS)
        self._last: dict[int, np.ndarray] = {}
        self._writer: Any = None
        self._shape: tuple[int, ...] | None = None
        self.frames = 0

    def __call__(self, running: torch.Tensor) -> None:
        """Append one frame: the current state of each recorded env still ``running``; the others hold theirs.
        Once no recorded env runs, nothing (the evaluation's other envs may run on: an eval video of env 0 ends
        with its episode).
        """
        if self._last and not any(bool(running[i]) for i in self.env_ids):
            return
        cells = []
        for i in self.env_ids:
            if bool(running[i]) or i not in self._last:
                self._last[i] = self._render(i)
                cells.append(self._last[i])
            else:
                cells.append(self._last[i] // 2)  # episode over: dimmed
        self._append(cells[0] if len(cells) == 1 else tile(cells))

    def _render(self, env_index: int) -> np.ndarray:
        try:
            frame = self.env.render(env_index)
        except envs.RenderError as exc:
            raise VideoError(f"cannot record a video: {exc}") from exc
        if self._last and frame.shape != next(iter(self._last.values())).shape:
            raise VideoError(f"env {env_index} renders frames of shape {frame.shape}, env {self.env_ids[0]} of "
                             f"{next(iter(self._last.values())).shape}; a video needs one size")
        return frame

    def _append(self, frame: np.ndarray) -> None:
        if self.suffix == ".mp4":
            frame = _pad_to(frame, MACRO_BLOCK)
        if self._writer is None:
            self._writer = self._open()
            self._shape = frame.shape
        self._writer.append_data(frame)
        self.frames += 1

    def _open(self) -> Any:
        import imageio.v2 as imageio

        if self.suffix == ".gif":  # GIF frame times are in whole 10 ms
            duration = max(MIN_GIF_FRAME_MS, 10 * round(100 / self.fps))
            return imageio.get_writer(self.path, mode="I", duration=duration, loop=0)
        return imageio.get_writer(self.path, fps=self.fps, codec="libx264", macro_block_size=1,
                                  ffmpeg_log_level="error")

    def close(self) -> VideoSummary:
        """Finish the file; what it holds. Without a single frame (nothing was recorded) no file is written."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        height, width = self._shape[:2] if self._shape is not None else (0, 0)
        return VideoSummary(self.path, self.frames, int(height), int(width), self.fps)

    def __enter__(self) -> EpisodeRecorder:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _pad_to(frame: np.ndarray, multiple: int) -> np.ndarray:
    """``frame`` grown to a multiple of ``multiple`` in height and width by repeating its edge pixels."""
    height, width = frame.shape[:2]
    pad_h, pad_w = -height % multiple, -width % multiple
    if not pad_h and not pad_w:
        return frame
    return np.pad(frame, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")


class EvalVideos:
    """``eval_video=true``: one video per evaluation of a run, ``<folder>/eval_<env_steps>.mp4``, of the first env's
    episode. Built at start-up, where it draws one frame, so an env that cannot render (or a missing extra)
    stops the run before it trains rather than at its first evaluation.
    """

    def __init__(self, folder: str | Path, env: envs.VecEnv) -> None:
        _require_writer(".mp4")
        self.folder, self.env = Path(folder), env
        try:
            env.render(0)
        except envs.RenderError as exc:
            raise VideoError(f"eval_video=true but the evaluation env cannot render: {exc}; set eval_video=false "
                             "or give the env a render(env_index)") from exc

    def recorder(self, env_steps: int) -> EpisodeRecorder:
        """The recorder of the evaluation at ``env_steps`` (the folder is made at the first: a run that fails to
        start leaves no trace of it).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        return EpisodeRecorder(self.env, self.folder / f"eval_{env_steps}.mp4", env_ids=[0])
