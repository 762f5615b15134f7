"""``envs.make("Mjlab-...")``: mjlab's registered tasks through its rsl_rl wrapper and :func:`from_rsl_rl`.

mjlab (the ``mjlab`` extra) simulates with MuJoCo Warp, on CPU too. Its
same-step auto-reset loses the true last observation, which our learners and
dynamics models need at every time-out. mjlab's documented alternative,
``auto_reset=False``, returns the terminal observation and leaves the reset to
the caller: :class:`_FinalObsCapture` resets the finished envs itself and hands
the terminal observation on as ``extras["final_obs"]`` (as Isaac Lab's
``compute_final_obs`` does), so ``info["final_obs_valid"]`` is all True.
"""

from __future__ import annotations

import difflib
import os
import sys
from typing import Any

import torch
from tensordict import TensorDict

from envs.adapters.rsl_rl import RslRlVecEnv, from_rsl_rl
from envs.base import MissingExtraError, RenderError, UnknownEnvError
from envs.offscreen import headless_gl

__all__ = ["make_mjlab"]


class _FinalObsCapture:
    """An rsl_rl VecEnv over mjlab with ``auto_reset=False`` that resets finished envs after reading their obs.

    Everything but ``step`` is delegated to mjlab's ``RslRlVecEnvWrapper``.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict]:
        obs, rewards, dones, extras = self.inner.step(actions)
        extras.pop("final_obs", None)
        done = dones.bool()
        done_ids = done.nonzero(as_tuple=False).squeeze(-1)
        if len(done_ids) == 0:  # the same host sync mjlab's own step makes
            return obs, rewards, dones, extras
        rewards = rewards.clone()  # mjlab reuses these buffers; the reset below must not reach them
        if "time_outs" in extras:
            extras["time_outs"] = extras["time_outs"].clone()
        # reset() backfills only the reset envs' history/delay buffers; it rebinds extras["log"] to
        # the episode statistics, as the auto-reset would have logged them.
        after, _ = self.inner.unwrapped.reset(env_ids=done_ids)
        extras["final_obs"] = obs
        next_obs = TensorDict(after, batch_size=[self.inner.num_envs]).where(done, obs)
        return next_obs, rewards, dones, extras


def _import_mjlab(env_id: str) -> tuple[Any, Any, Any, Any]:
    """mjlab's env class, rsl_rl wrapper and registry functions, or an error naming the extra."""
    try:
        import mjlab  # noqa: F401 - only checks that the mjlab extra is installed
        import mjlab.tasks  # noqa: F401 - importing it registers every task
        from mjlab.envs import ManagerBasedRlEnv
        from mjlab.rl import RslRlVecEnvWrapper
        from mjlab.tasks.registry import list_tasks, load_env_cfg
    except ImportError as e:
        raise MissingExtraError(
            f"{env_id!r} is an mjlab task and needs mjlab, which is not installed ({e}); install the extra with "
            '`pip install -e ".[mjlab]"` (./run_async.sh installs it by itself for a config with an Mjlab- id)'
        ) from e
    return ManagerBasedRlEnv, RslRlVecEnvWrapper, list_tasks, load_env_cfg


def _check_offscreen_gl(env_id: str) -> None:
    """Refuse, before building anything, a renderer that cannot work: mjlab draws through ``mujoco.Renderer``,
    whose OpenGL backend mujoco fixes from ``MUJOCO_GL`` when it is first imported. mjlab sets ``egl`` on import,
    unless mujoco came first with it unset (GLFW), which needs a display.
    """
    gl = sys.modules.get("mujoco.rendering.classic.gl_context")
    captured = getattr(gl, "_MUJOCO_GL", None)  # None: mujoco not imported yet (or a version without it)
    headless = not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")
    if captured in ("", "glfw", "enable", "enabled", "on", "true", "1") and headless and sys.platform == "linux":
        raise RenderError(f"{env_id} cannot render here: mujoco was imported before MUJOCO_GL was set, so it draws "
                          "through GLFW, which needs a display; start Python with MUJOCO_GL=egl (or osmesa)")


def make_mjlab(
    env_id: str,
    num_envs: int,
    device: torch.device,
    seed: int | None = None,
    obs_group: str = "actor",
    final_obs: bool = True,
    validate_actions: bool = True,
    render_mode: str | None = None,
    **cfg_overrides: Any,
) -> RslRlVecEnv:
    """Build ``num_envs`` copies of the mjlab task ``env_id`` on ``device`` (CPU runs on Warp's CPU backend).

    ``seed`` goes to mjlab (``cfg.seed``: it seeds Python, NumPy, torch and Warp's
    global generators) and to every full reset. ``final_obs=False`` keeps mjlab's
    auto-reset (``final_obs_valid`` False at episode ends). ``cfg_overrides`` set
    fields of the task's ``ManagerBasedRlEnvCfg``, e.g. ``episode_length_s=1.0`` or
    ``scale_rewards_by_dt=False``. ``render_mode="rgb_array"`` builds mjlab's offscreen renderer (MuJoCo
    through ``MUJOCO_GL``: egl, or osmesa where only it is installed; envs.offscreen), drawing env 0 and its
    neighbours.
    """
    if render_mode == "rgb_array":
        _check_offscreen_gl(env_id)
        headless_gl()  # before mjlab's import sets egl: osmesa where only it is installed
    env_cls, wrapper_cls, list_tasks, load_env_cfg = _import_mjlab(env_id)
    tasks = list_tasks()
    if env_id not in tasks:
        close = difflib.get_close_matches(env_id, tasks, n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise UnknownEnvError(f"unknown mjlab task {env_id!r}; registered: {', '.join(tasks)}.{hint}")
    cfg = load_env_cfg(env_id)
    for key, value in cfg_overrides.items():
        if not hasattr(cfg, key):
            raise TypeError(
                f"unknown option {key!r} for {env_id}: neither a make() argument nor a field of its env cfg"
            )
        setattr(cfg, key, value)
    cfg.scene.num_envs = num_envs
    cfg.seed = seed
    cfg.auto_reset = not final_obs
    env = wrapper_cls(env_cls(cfg, device=str(device), render_mode=render_mode))
    vec_env = from_rsl_rl(
        _FinalObsCapture(env) if final_obs else env, obs_group, seed=seed, validate_actions=validate_actions
    )
    vec_env.spec_id = env_id
    return vec_env
