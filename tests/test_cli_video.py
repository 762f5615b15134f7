"""Videos from the command line: `train ... eval_video=true` keeps one per evaluation on every trainer, `resume`
can turn it on, `eval --video` films the evaluation's episodes; what cannot work is one line and exit 2.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from mbpo import cli
from mbpo.run.metrics import read_metrics
from tests.conftest import TRAINER_RUNS

imageio = pytest.importorskip("imageio.v3", reason="the video extra is not installed (pip install -e '.[video]')")
pytestmark = pytest.mark.timeout(120)
MP4 = pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is None,
                         reason="imageio-ffmpeg, the video extra's MP4 writer, is not installed")

COMMON = ["device=cpu", "progress=false", "total_env_steps=200", "eval_every=100", "eval_episodes=2", "log_every=100",
          "agent.learning_starts=50", "agent.batch_size=32", "agent.sac.hidden_sizes=[32,32]", "checkpoint.every=100"]
TINY = ["--config", "configs/pendulum_sac.yaml", "env.id=PointMass-v0", *COMMON]
POINT_MASS_FRAME = (160, 640)  # PointMass-v0's picture, height x width
EPISODE = 25  # PointMass-v0's time limit: one frame per step


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def evaluated_at(run: Path) -> list[str]:
    return [r["env_steps"] for r in read_metrics(run / "metrics.csv") if r["eval_return"] != ""]


def assert_films_point_mass(path: Path, episodes: int = 1) -> None:
    frames = imageio.imread(path, index=None)
    height, width = POINT_MASS_FRAME
    assert frames.shape == (EPISODE, height, width * episodes, 3)
    assert frames[0].std() > 0 and not np.array_equal(frames[0], np.full_like(frames[0], frames[0].flat[0]))


@MP4
@pytest.mark.parametrize("trainer", ["sync", "thread", pytest.param("process", marks=pytest.mark.slow)],
                         ids=["sync", "async-thread", "async-process"])  # by name: process shares the worker's server
def test_train_keeps_a_video_of_each_evaluation(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                trainer: str) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", *TINY, *TRAINER_RUNS[trainer], "eval_video=true", f"run_dir={run}"]) == 0
    assert last_json(capsys.readouterr().out)["env_steps"] >= 200
    steps = evaluated_at(run)
    assert steps and sorted(p.name for p in (run / "videos").iterdir()) == sorted(f"eval_{s}.mp4" for s in steps)
    for s in steps:
        assert_films_point_mass(run / "videos" / f"eval_{s}.mp4")  # the first env's episode


@MP4
def test_no_videos_by_default_and_a_resume_can_turn_them_on(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", *TINY, "trainer=sync", "total_env_steps=100", f"run_dir={run}"]) == 0
    assert not (run / "videos").exists()
    assert cli.main(["resume", str(run), "total_env_steps=200", "eval_video=true"]) == 0
    capsys.readouterr()
    assert [p.name for p in (run / "videos").iterdir()] == ["eval_200.mp4"]


def test_eval_films_every_episode_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", *TINY, "trainer=sync", "total_env_steps=100", f"run_dir={run}"]) == 0
    capsys.readouterr()
    checkpoint = run / "checkpoints" / "ckpt_000000000100.pt"
    gif = tmp_path / "policy.gif"
    # --video before --episodes: the option takes its value wherever it stands
    assert cli.main(["eval", "--checkpoint", str(checkpoint), "--video", str(gif), "--episodes", "2"]) == 0
    result = last_json(capsys.readouterr().out)
    assert result["video"] == str(gif) and result["video_frames"] == EPISODE and result["video_episodes"] == 2
    assert result["video_size"] == [2 * POINT_MASS_FRAME[1], POINT_MASS_FRAME[0]]  # [width, height]: a 2 x 1 grid
    assert_films_point_mass(gif, episodes=2)


@pytest.mark.parametrize(("video", "message"), [
    ("out.avi", "error: video path 'out.avi' has the extension '.avi'; expected one of .mp4, .gif"),
    ("missing/out.mp4", "error: video path 'missing/out.mp4': the folder 'missing' does not exist"),
    ("folder.mp4", "error: video path 'folder.mp4': is a folder; expected a file path in it (e.g. folder.mp4/out.mp4)"),
    ("/proc/out.gif", "error: video path '/proc/out.gif': cannot be written ("),
])
def test_eval_refuses_a_video_it_cannot_write_before_loading_anything(
        video: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.mp4").mkdir()
    assert cli.main(["eval", "--checkpoint", "no-such.pt", "--video", video]) == 2  # the checkpoint is not read
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err


def test_a_missing_video_extra_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("imageio", "imageio_ffmpeg") else find_spec(name, *a))
    assert cli.main(["eval", "--checkpoint", "no-such.pt", "--video", str(tmp_path / "a.mp4")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: writing a .mp4 video needs imageio and imageio-ffmpeg, which are not installed; "
                   "install the video extra: "
                   'pip install -e ".[video]"')


@MP4
def test_eval_video_with_an_env_that_cannot_render_stops_at_start_up(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", "--config", "examples/point_reach_sac.yaml", *COMMON, "trainer=sync", "eval_video=true",
                     f"run_dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: eval_video=true but the evaluation env cannot render: PointReach")
    assert not run.exists()  # nothing trained: the start-up leaves no run dir behind
