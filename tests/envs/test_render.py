"""VecEnv.render: native classic envs draw their state with numpy; gymnasium (MuJoCo) and mjlab envs render
offscreen through MUJOCO_GL; wrappers pass it through; envs that cannot draw say so in one RenderError.

The MuJoCo and mjlab tests need an offscreen OpenGL library (libEGL or libOSMesa) and skip, with the reason,
where there is none.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import envs
from envs.adapters.rsl_rl import from_rsl_rl
from envs.classic import TASKS, TOY_TASKS
from envs.contract import as_float32
from envs.offscreen import offscreen_gl
from tests.envs.test_rsl_rl_adapter import _Contract

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
NATIVE = sorted(TASKS) + sorted(TOY_TASKS)
needs_offscreen_gl = pytest.mark.skipif(
    offscreen_gl() is None, reason="neither EGL (libEGL with a vendor library) nor OSMesa is installed: MuJoCo cannot "
                                   "render offscreen here (apt-get install libegl1 libegl-mesa0, or libosmesa6; see "
                                   "docs/envs.md)")


def _two_states(env_id: str) -> torch.Tensor:
    """Two clearly different states of the task, in its state layout."""
    far = {"Pendulum-v1": [[0.0, 0.0], [math.pi / 2, 0.0]],
           "CartPole-v1": [[-1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.15, 0.0]],
           "MountainCarContinuous-v0": [[-1.0, 0.0], [0.3, 0.0]],
           "Acrobot-v1": [[0.0, 0.0, 0.0, 0.0], [1.5, -1.0, 0.0, 0.0]],
           "PointMass-v0": [[-1.5], [1.5]]}
    return torch.tensor(far[env_id])


@pytest.mark.parametrize("env_id", NATIVE)
def test_a_native_env_draws_its_state(env_id: str) -> None:
    env = envs.make(env_id, 2, seed=0, render_mode="rgb_array")
    env.reset(seed=0)
    env.state = _two_states(env_id)  # type: ignore[attr-defined]  # a native env's state is writable
    first, second = env.render(0), env.render(1)
    assert first.dtype == np.uint8 and first.ndim == 3 and first.shape[-1] == 3
    assert first.shape[0] % 16 == 0 and first.shape[1] % 16 == 0  # H.264 takes it as drawn, no rescaling
    assert first.std() > 0  # not a blank canvas
    assert not np.array_equal(first, second)  # two states, two pictures
    assert np.array_equal(first, env.render(0))  # drawn from the state alone
    assert env.render_fps is not None and env.render_fps > 0


def test_the_pendulum_is_drawn_upright_at_theta_zero_and_hanging_at_pi() -> None:
    env = envs.make("Pendulum-v1", 2)
    env.reset(seed=0)
    env.state = torch.tensor([[0.0, 0.0], [math.pi, 0.0]])  # type: ignore[attr-defined]
    up, down = env.render(0), env.render(1)
    height, width = up.shape[:2]
    column = up[:, width // 2]  # the rod lies along the centre column
    painted = np.flatnonzero((column != 255).any(axis=-1))
    assert painted.min() < height // 2 - 50 and painted.max() < height // 2 + 20  # above the axle
    painted = np.flatnonzero((down[:, width // 2] != 255).any(axis=-1))
    assert painted.max() > height // 2 + 50 and painted.min() > height // 2 - 20  # below it


def test_render_checks_its_index_and_mode() -> None:
    env = envs.make("CartPole-v1", 2)
    with pytest.raises(RuntimeError, match="call reset"):
        env.render(0)
    env.reset(seed=0)
    with pytest.raises(IndexError, match="env_index=2 is out of range for num_envs=2"):
        env.render(2)
    with pytest.raises(ValueError, match="render_mode='human' is not supported"):
        envs.make("CartPole-v1", 2, render_mode="human")


def test_a_wrapper_passes_render_through_and_an_env_without_it_says_so() -> None:
    env = envs.make("Pendulum-v1", 1)
    env.reset(seed=0)
    wrapped = as_float32(env, ("obs",))
    assert np.array_equal(wrapped.render(0), env.render(0))
    assert wrapped.render_fps == env.render_fps and wrapped.renders_batch is False
    plain = from_rsl_rl(_Contract())  # a bare rsl_rl env: no render() anywhere
    with pytest.raises(envs.RenderError, match="has no render"):
        plain.render(0)


class _Viewport(_Contract):
    """An rsl_rl env that renders one view of its batch (Isaac Lab's viewport, mjlab's viewer)."""

    metadata = {"render_fps": 50}

    def __init__(self, frame: np.ndarray | None) -> None:
        super().__init__()
        self.frame = frame

    def render(self) -> np.ndarray | None:
        return self.frame


def test_an_rsl_rl_env_renders_its_one_view_of_the_batch() -> None:
    frame = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    env = from_rsl_rl(_Viewport(frame))
    assert env.renders_batch and env.render_fps == 50
    assert np.array_equal(env.render(0), frame)
    with pytest.raises(envs.RenderError, match="renders one view of its batch"):
        env.render(1)
    with pytest.raises(envs.RenderError, match="render_mode='rgb_array'"):
        from_rsl_rl(_Viewport(None)).render(0)  # built without a renderer: render() gives None


def test_a_gymnasium_env_built_without_render_mode_says_how_to_get_frames() -> None:
    env = envs.make("CartPole-v1", 1, source="gymnasium")
    env.reset(seed=0)
    with pytest.raises(envs.RenderError, match=r"render_mode=None.*envs\.make\(\.\.\., render_mode='rgb_array'\)"):
        env.render(0)
    env.close()


@needs_offscreen_gl
def test_a_mujoco_env_renders_offscreen_without_a_display() -> None:
    env = envs.make("Hopper-v5", 2, seed=0, render_mode="rgb_array")
    try:
        env.reset(seed=0)
        frame = env.render(1)
        assert frame.shape == (480, 480, 3) and frame.dtype == np.uint8 and frame.std() > 0
        assert env.render_fps == 125  # gymnasium's 1 / dt
        with pytest.raises(IndexError):
            env.render(2)
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.timeout(300)  # a cold Warp kernel cache compiles for ~30 s (more on a busy machine)
@needs_offscreen_gl
def test_an_mjlab_task_renders_its_viewer_offscreen() -> None:
    """In a fresh interpreter, as the CLI builds it: mjlab picks MUJOCO_GL=egl before mujoco is imported."""
    pytest.importorskip("mjlab", reason="mjlab is not installed (pip install -e '.[mjlab]')")
    script = """
import json, envs
env = envs.make("Mjlab-Cartpole-Balance", 2, seed=0, render_mode="rgb_array")
env.reset(seed=0)
frame = env.render(0)
print(json.dumps({"shape": list(frame.shape), "dtype": str(frame.dtype), "std": float(frame.std()),
                  "batch": env.renders_batch, "fps": env.render_fps}))
env.close()
"""
    environ = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY")}
    environ["MUJOCO_GL"] = str(offscreen_gl())  # what envs.make picks on this machine
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environ, cwd=ROOT,
                          timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["shape"]) == 3 and result["shape"][-1] == 3 and result["dtype"] == "uint8"
    assert result["std"] > 0 and result["batch"] is True and result["fps"] == pytest.approx(20.0)  # 1 / step_dt


def test_mjlab_refuses_to_render_where_mujoco_already_chose_glfw_without_a_display(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """mujoco fixes its OpenGL backend on first import: imported with MUJOCO_GL unset, it would need a display."""
    monkeypatch.setitem(sys.modules, "mujoco.rendering.classic.gl_context", types.SimpleNamespace(_MUJOCO_GL=""))
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    with pytest.raises(envs.RenderError, match="start Python with MUJOCO_GL=egl"):
        envs.make("Mjlab-Cartpole-Balance", 2, render_mode="rgb_array")  # refused before mjlab is imported


@pytest.mark.parametrize(("libraries", "display", "expected"), [
    ({"EGL", "EGL_mesa", "OSMesa"}, None, "egl"),
    ({"EGL", "OSMesa"}, None, "osmesa"),  # libEGL without a vendor library cannot make a context
    ({"OSMesa"}, None, "osmesa"),
    (set(), None, None),
    ({"EGL", "EGL_nvidia"}, ":0", None),  # a display: GLFW works, MUJOCO_GL is left alone
])
def test_headless_gl_picks_the_backend_whose_libraries_are_installed(
        monkeypatch: pytest.MonkeyPatch, libraries: set[str], display: str | None, expected: str | None) -> None:
    import ctypes.util

    from envs.offscreen import headless_gl

    monkeypatch.setattr(ctypes.util, "find_library", lambda name: f"lib{name}.so" if name in libraries else None)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    if display is None:
        monkeypatch.delenv("DISPLAY", raising=False)
    else:
        monkeypatch.setenv("DISPLAY", display)
    headless_gl()
    assert os.environ.get("MUJOCO_GL") == expected
    monkeypatch.setenv("MUJOCO_GL", "glx")
    headless_gl()
    assert os.environ["MUJOCO_GL"] == "glx"  # a user's choice stands
