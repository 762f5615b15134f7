"""mbpo.run.video: evaluation episodes written as MP4 or GIF that decode, with one frame per step, not blank;
several envs tiled; paths, formats and the missing extra refused in one line each.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import envs
from mbpo.errors import MbpoError
from mbpo.run.evaluation import evaluate_episodes
from mbpo.run.video import EpisodeRecorder, EvalVideos, VideoError, check_video_path, tile

imageio = pytest.importorskip("imageio.v3", reason="the video extra is not installed (pip install -e '.[video]')")
pytestmark = pytest.mark.timeout(60)
MP4 = pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is None,
                         reason="imageio-ffmpeg, the video extra's MP4 writer, is not installed")


class Push:
    """A fixed-action stand-in for a trained policy: what evaluation asks of an agent."""

    def __init__(self, action: float | int) -> None:
        self.action = action

    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        n = obs.shape[0]
        if isinstance(self.action, int):
            return torch.full((n,), self.action, dtype=torch.int64)
        return torch.full((n, 1), self.action, dtype=torch.float32)


@pytest.mark.parametrize("suffix", [pytest.param(".mp4", marks=MP4), ".gif"])
def test_an_episode_video_decodes_with_one_frame_per_step(tmp_path: Path, suffix: str) -> None:
    env = envs.make("Pendulum-v1", 1, seed=0)
    path = tmp_path / f"pendulum{suffix}"
    with EpisodeRecorder(env, path) as recorder:
        episodes = evaluate_episodes(Push(2.0), env, seed=3, frames=recorder)  # type: ignore[arg-type]
    summary = recorder.close()
    frames = imageio.imread(path, index=None)
    assert len(frames) == episodes.lengths[0] == summary.frames == 200
    assert frames.shape[1:3] == (summary.height, summary.width) == (400, 400)
    assert frames[0].std() > 0 and not np.array_equal(frames[0], np.full_like(frames[0], frames[0].flat[0]))
    assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 0.5  # the pendulum moved
    assert summary.fps == 30


@MP4
def test_several_episodes_are_tiled_and_a_finished_one_holds_its_last_frame_dimmed(tmp_path: Path) -> None:
    env = envs.make("CartPole-v1", 3, seed=0)
    path = tmp_path / "cartpole.mp4"
    with EpisodeRecorder(env, path) as recorder:
        episodes = evaluate_episodes(Push(1), env, seed=5, frames=recorder)  # type: ignore[arg-type]
    frames = imageio.imread(path, index=None)
    assert len(frames) == max(episodes.lengths) == recorder.frames  # the longest episode sets the length
    assert frames.shape[1:3] == (2 * 400, 2 * 640)  # 3 envs in a 2 x 2 grid, the fourth cell black
    assert frames[:, 400:, 640:].max() <= 16  # the empty cell (codec noise aside)
    shortest = int(np.argmin(episodes.lengths))
    row, col = divmod(shortest, 2)
    cell = frames[-1, row * 400:(row + 1) * 400, col * 640:(col + 1) * 640]
    assert cell.max() < 160  # dimmed: its white background is at half brightness


def test_tile_lays_frames_out_row_by_row() -> None:
    frames = [np.full((2, 3, 3), v, dtype=np.uint8) for v in (10, 20, 30, 40, 50)]
    grid = tile(frames)
    assert grid.shape == (2 * 2, 3 * 3, 3)  # 5 frames: 3 columns, 2 rows
    assert grid[0, 0, 0] == 10 and grid[0, 3, 0] == 20 and grid[0, 6, 0] == 30 and grid[2, 0, 0] == 40
    assert grid[2, 6, 0] == 0  # the sixth cell is empty


@MP4
def test_a_video_path_is_checked_before_anything_runs(tmp_path: Path) -> None:
    assert check_video_path(tmp_path / "a.MP4") == tmp_path / "a.MP4"  # the extension in any case
    with pytest.raises(VideoError, match=r"extension '\.avi'; expected one of \.mp4, \.gif"):
        check_video_path(tmp_path / "a.avi")
    with pytest.raises(VideoError, match=r"extension '\(none\)'"):
        check_video_path(tmp_path / "video")
    with pytest.raises(VideoError, match=r"the folder '.*missing' does not exist"):
        check_video_path(tmp_path / "missing" / "a.mp4")
    assert issubclass(VideoError, MbpoError)  # the CLI prints it as one line, exit 2


def test_a_missing_video_extra_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "imageio_ffmpeg" else find_spec(name, *a))
    with pytest.raises(VideoError, match=r'needs imageio-ffmpeg.*the video extra: pip install -e "\.\[video\]"'):
        check_video_path(tmp_path / "a.mp4")
    check_video_path(tmp_path / "a.gif")  # a GIF needs only imageio (and Pillow, which it requires)


class NoPicture(envs.VecEnv):
    """A factory-style env with no render of its own."""

    def __init__(self) -> None:
        inner = envs.make("PointMass-v0", 1)
        self.inner = inner
        self.num_envs, self.device = 1, inner.device
        self.observation_space, self.action_space = inner.observation_space, inner.action_space
        self.max_episode_steps, self.episode_steps = inner.max_episode_steps, inner.episode_steps

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.inner.reset(seed=seed, env_ids=env_ids)

    def step(self, actions: torch.Tensor) -> envs.base.StepResult:
        return self.inner.step(actions)


@MP4
def test_an_env_that_cannot_render_is_one_video_error(tmp_path: Path) -> None:
    env = NoPicture()
    with pytest.raises(VideoError, match="cannot record a video: NoPicture .* cannot render frames"):
        with EpisodeRecorder(env, tmp_path / "a.mp4") as recorder:
            evaluate_episodes(Push(0.5), env, seed=0, frames=recorder)  # type: ignore[arg-type]
    assert not (tmp_path / "a.mp4").exists()  # nothing half-written
    with pytest.raises(VideoError, match="eval_video=true but the evaluation env cannot render"):
        EvalVideos(tmp_path / "videos", env)
    assert not (tmp_path / "videos").exists()


@MP4
def test_eval_videos_are_named_by_env_steps_and_film_the_first_env(tmp_path: Path) -> None:
    env = envs.make("PointMass-v0", 4, seed=0)
    env.reset(seed=0)
    videos = EvalVideos(tmp_path / "videos", env)
    recorder = videos.recorder(1_500)
    with recorder:
        evaluate_episodes(Push(0.5), env, seed=0, frames=recorder)  # type: ignore[arg-type]
    frames = imageio.imread(tmp_path / "videos" / "eval_1500.mp4", index=None)
    assert recorder.env_ids == [0] and frames.shape == (25, 160, 640, 3)  # one env, PointMass's 25 steps


@MP4
def test_an_eval_video_of_env_0_ends_with_its_episode_not_the_longest(tmp_path: Path) -> None:
    """It ran as long as the longest of the evaluation's episodes, env 0's last frame held dimmed for the rest."""
    env = envs.make("CartPole-v1", 4, seed=0)
    env.reset(seed=0)
    recorder = EvalVideos(tmp_path / "videos", env).recorder(100)
    with recorder:
        episodes = evaluate_episodes(Push(1), env, seed=4, frames=recorder)  # type: ignore[arg-type]
    assert episodes.lengths[0] < max(episodes.lengths)  # env 0's episode is the shortest (8 of 8-11 steps)
    frames = imageio.imread(tmp_path / "videos" / "eval_100.mp4", index=None)
    assert len(frames) == recorder.frames == episodes.lengths[0]
