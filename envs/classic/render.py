"""Offscreen drawing for the native classic envs: numpy rasterises a few shapes into an RGB array.

Gymnasium draws these tasks with pygame, which needs the pygame package (and, for a window, a display). A
video of a classic env needs neither: each task's ``render(state)`` draws one env's state on a
:class:`Canvas`, in world units, with anti-aliased edges (a pixel is covered by how far its centre lies
inside the shape).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["Canvas", "Color"]

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)


class Canvas:
    """A ``width`` x ``height`` RGB image showing world coordinates (x right, y up) at ``scale`` pixels per unit,
    with the world point ``center`` at the image's centre.
    """

    def __init__(self, width: int, height: int, scale: float, center: tuple[float, float] = (0.0, 0.0),
                 background: Color = WHITE) -> None:
        self.width, self.height, self.scale, self.center = width, height, float(scale), center
        self.pixels = np.empty((height, width, 3), dtype=np.float32)
        self.pixels[:] = background

    def to_pixels(self, x: float, y: float) -> tuple[float, float]:
        """Where world point ``(x, y)`` lands: ``(column, row)`` in pixels, rows counted from the top."""
        return ((x - self.center[0]) * self.scale + self.width / 2,
                self.height / 2 - (y - self.center[1]) * self.scale)

    def line(self, a: tuple[float, float], b: tuple[float, float], thickness: float, color: Color) -> None:
        """A segment from ``a`` to ``b`` with round ends, ``thickness`` world units wide."""
        (ax, ay), (bx, by) = self.to_pixels(*a), self.to_pixels(*b)
        r = thickness * self.scale / 2
        box = self._box(min(ax, bx) - r, min(ay, by) - r, max(ax, bx) + r, max(ay, by) + r)
        if box is None:
            return
        px, py = self._grid(box)
        dx, dy = bx - ax, by - ay
        length2 = dx * dx + dy * dy
        t = np.zeros_like(px) if length2 == 0 else np.clip(((px - ax) * dx + (py - ay) * dy) / length2, 0.0, 1.0)
        distance = np.hypot(px - (ax + t * dx), py - (ay + t * dy))
        self._blend(box, r - distance, color)

    def polyline(self, points: Sequence[tuple[float, float]], thickness: float, color: Color) -> None:
        for a, b in zip(points[:-1], points[1:], strict=True):
            self.line(a, b, thickness, color)

    def circle(self, center: tuple[float, float], radius: float, color: Color) -> None:
        cx, cy = self.to_pixels(*center)
        r = radius * self.scale
        box = self._box(cx - r, cy - r, cx + r, cy + r)
        if box is None:
            return
        px, py = self._grid(box)
        self._blend(box, r - np.hypot(px - cx, py - cy), color)

    def rect(self, low: tuple[float, float], high: tuple[float, float], color: Color) -> None:
        """An axis-aligned rectangle between world corners ``low`` (bottom left) and ``high`` (top right)."""
        (x0, y1), (x1, y0) = self.to_pixels(*low), self.to_pixels(*high)
        box = self._box(x0, y0, x1, y1)
        if box is None:
            return
        px, py = self._grid(box)
        inside = np.minimum(np.minimum(px - x0, x1 - px), np.minimum(py - y0, y1 - py))
        self._blend(box, inside, color)

    def image(self) -> np.ndarray:
        """The picture as ``(height, width, 3)`` uint8."""
        return np.clip(np.rint(self.pixels), 0, 255).astype(np.uint8)

    def _box(self, x0: float, y0: float, x1: float, y1: float) -> tuple[int, int, int, int] | None:
        """The pixel rows and columns a shape's bounds touch, clipped to the image; None if it is off the image."""
        c0, c1 = max(int(np.floor(x0)) - 1, 0), min(int(np.ceil(x1)) + 1, self.width)
        r0, r1 = max(int(np.floor(y0)) - 1, 0), min(int(np.ceil(y1)) + 1, self.height)
        return None if c0 >= c1 or r0 >= r1 else (r0, r1, c0, c1)

    @staticmethod
    def _grid(box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        """The pixel centres of ``box`` as column and row coordinates."""
        r0, r1, c0, c1 = box
        rows, cols = np.mgrid[r0:r1, c0:c1].astype(np.float32)
        return cols + 0.5, rows + 0.5

    def _blend(self, box: tuple[int, int, int, int], inside: np.ndarray, color: Color) -> None:
        """Paint ``color`` over ``box`` by coverage: pixels ``inside`` by half a pixel or more get it fully."""
        r0, r1, c0, c1 = box
        alpha = np.clip(inside + 0.5, 0.0, 1.0)[..., None]
        region = self.pixels[r0:r1, c0:c1]
        region += alpha * (np.asarray(color, dtype=np.float32) - region)
