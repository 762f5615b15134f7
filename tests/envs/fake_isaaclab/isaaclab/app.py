"""``AppLauncher``: starts the (fake) Isaac Sim app; Isaac Lab's other modules import only after it."""

from __future__ import annotations

from typing import Any

launches: list[dict[str, Any]] = []
"""One entry per app started in this process (Isaac Sim allows one)."""


class _App:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class AppLauncher:
    def __init__(self, launcher_args: Any = None, **kwargs: Any) -> None:
        if launches:
            raise RuntimeError("the simulation app is already running in this process")
        launches.append(dict(kwargs))
        self.app = _App()
