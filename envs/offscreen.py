"""Offscreen OpenGL for MuJoCo's renderers (gymnasium's MuJoCo envs, mjlab's viewer) on a machine without a display.

MuJoCo picks its OpenGL backend from ``MUJOCO_GL``: ``glfw`` (the default) needs a display, ``egl`` and ``osmesa``
do not. :func:`headless_gl` sets it, where it is unset and there is no display, to the backend whose libraries
are installed (docs/envs.md lists the system packages).
"""

from __future__ import annotations

import ctypes.util
import os
import sys

__all__ = ["offscreen_gl", "headless_gl"]


def offscreen_gl() -> str | None:
    """The offscreen OpenGL backend MuJoCo can use here without a display: ``MUJOCO_GL`` where set, else ``egl``
    where libEGL and a vendor library for it (Mesa's or NVIDIA's) are installed, else ``osmesa`` where libOSMesa
    is; None where neither is.
    """
    if os.environ.get("MUJOCO_GL"):
        return os.environ["MUJOCO_GL"]
    if ctypes.util.find_library("EGL") and (ctypes.util.find_library("EGL_mesa")
                                            or ctypes.util.find_library("EGL_nvidia")):
        return "egl"
    return "osmesa" if ctypes.util.find_library("OSMesa") else None


def headless_gl() -> None:
    """Let MuJoCo render offscreen without a display: on Linux where neither a display nor ``MUJOCO_GL`` is set,
    ``MUJOCO_GL`` = :func:`offscreen_gl` (gymnasium's own fallback would try GLFW first, and fail there).
    """
    if (sys.platform.startswith("linux") and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")
            and not os.environ.get("MUJOCO_GL")):
        backend = offscreen_gl()
        if backend is not None:
            os.environ["MUJOCO_GL"] = backend
