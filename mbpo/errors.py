"""The one base class for a user's mistake (as opposed to a bug in mbpo), and the env's faults among them.

The CLI prints such an error as one line, ``error: <message>``, and exits 2;
anything else keeps its traceback. Messages say what was wrong and how to fix it.
"""

from __future__ import annotations

__all__ = ["MbpoError", "FromElsewhereError", "EnvFaultError", "RemoteMbpoError", "RunFailedError",
           "remote_mbpo_error"]


class MbpoError(Exception):
    """Something the user can fix: a config, a path, a checkpoint, a run dir."""


class RunFailedError(RuntimeError):
    """A run that could not go on, for a reason already reported with its own traceback where it happened (a
    collector that kept failing): the CLI ends with one ``error:`` line and exit 1, not a second traceback
    through the trainer's frames.
    """


class FromElsewhereError(MbpoError):
    """A user's mistake that may have been met in another process: ``detail`` keeps where it was raised (a
    collector process's or Ray actor's traceback), for the log; the message stays the one line the CLI prints.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail

    def __reduce__(self) -> tuple[type, tuple[str, str]]:  # picklable with its detail (a child sends it back)
        return type(self), (str(self), self.detail)


class EnvFaultError(FromElsewhereError):
    """What the env returned breaks a rule of the run (a non-finite value, the VecEnv contract). A collector
    that meets one fails the run at once on every backend: a restart would step the same env into it again.
    """


class RemoteMbpoError(FromElsewhereError):
    """A user's mistake (an :class:`MbpoError` other than an env fault) that a collector process or Ray actor met,
    by its message; ``detail`` also names its type. Like the original, it stops the run at once: a restarted
    collector would meet it again.
    """


def remote_mbpo_error(type_name: str, message: str, detail: str) -> MbpoError:
    """The parent-side error for an :class:`MbpoError` a child raised (it says so: a type's name alone could be
    a simulator's own ``ConfigError``), by its type's name: an env fault keeps its type.
    """
    faults = {cls.__name__: cls for cls in _subclasses(EnvFaultError)}
    if type_name in faults:
        return faults[type_name](message, detail=detail)
    return RemoteMbpoError(message, detail=detail)


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    sub: type
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
