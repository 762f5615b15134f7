"""CUDA stream lanes: each GPU role (learner, model thread) works on its own stream, and every
hand-off between roles is ordered by an event, because a Python lock orders host code, not GPU work.
On CPU a lane is a no-op, so the same code runs everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["Lane"]


class Lane:
    """A dedicated CUDA stream on ``device`` (None on CPU)."""

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Make this lane's stream current for the calling thread."""
        if self.stream is None:
            yield
            return
        with torch.cuda.stream(self.stream):
            yield

    def wait_default(self) -> None:
        """Queue nothing on this lane until the work already queued on the device's default stream (the
        learner's and collectors') has completed.
        """
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.default_stream(self.device))

    def synchronize(self) -> None:
        """Block the calling host thread until this lane's work is done (end of a model cycle)."""
        if self.stream is not None:
            self.stream.synchronize()
