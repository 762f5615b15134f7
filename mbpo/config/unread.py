"""Keys a command line sets that the rest of its config leaves unread: ``model.real_ratio=0.5`` on a run
without the model, ``runtime.ray.*`` off Ray. A note, not an error, and only for the command line's own keys:
a variant file inherits keys of its base that it then switches off (``configs/hopper_redq.yaml``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from mbpo.config.schema import Config

__all__ = ["unread_overrides", "note_unread_overrides"]

_SWITCHES = ("model.enabled", "model.lookahead.enabled", "model.macura", "agent.sac.crossq", "runtime.backend",
             "trainer")
"""Keys that turn a part on or off: set on the command line, they are read, whatever the part's own keys, unless
the part they belong to is off (``model.macura=true`` with ``model.enabled=false``)."""

_RULES: tuple[tuple[str, Callable[[Config], str | None]], ...] = (
    ("model.", lambda c: None if c.model.enabled else "model.enabled=false"),
    ("model.lookahead.", lambda c: None if c.model.lookahead.enabled else "model.lookahead.enabled=false"),
    ("model.macura_", lambda c: None if c.model.macura else "model.macura=false"),
    ("agent.sac.renorm_warmup", lambda c: None if c.agent.sac.crossq else "agent.sac.crossq=false"),
    ("runtime.ray.", lambda c: None if c.trainer == "async" and c.runtime.backend == "ray"
        else f"runtime.backend={c.runtime.backend}" if c.trainer == "async" else None),  # sync: trainers' own note
)
"""(key prefix, why a key under it is unread, None where it is read); the first prefix that says why wins."""


def unread_overrides(config: Config, overrides: list[str]) -> dict[str, list[str]]:
    """The ``key=value`` overrides ``config`` leaves unread, grouped by the setting that leaves them so."""
    unread: dict[str, list[str]] = {}
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        for prefix, why in _RULES:
            reason = why(config) if key.startswith(prefix) else None
            if reason is not None and key in _SWITCHES and reason.startswith(f"{key}="):
                continue  # a switch is read by its own part: only a part above it leaves it unread
            if reason is not None:
                unread.setdefault(reason, []).append(item.strip())
                break
    return unread


def note_unread_overrides(config: Config, overrides: list[str]) -> None:
    """One note per setting that leaves some of the command line's ``overrides`` unread (a new run's or a
    resume's).
    """
    for reason, items in unread_overrides(config, overrides).items():
        verb = "has" if len(items) == 1 else "have"
        print(f"[mbpo] note: {', '.join(items)} {verb} no effect with {reason}", file=sys.stderr)

