"""A Config built or changed in Python (``cfg.agent.sac.gamma = 1.5``), held in place to what a config file is
held to: each value of its key's type (OmegaConf's part for a file), then :func:`~mbpo.config.validation.validate`.
Unchecked, such a run trained on a gamma above 1 (its checkpoint, read back through the checks, then refused by
resume), or failed far from the cause (a ZeroDivisionError for batch_size 0, a TypeError for a str).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from mbpo.config.schema import Config, ConfigError
from mbpo.config.validation import validate

__all__ = ["check"]


def check(config: Config) -> None:
    """Raise the ConfigError a config file with ``config``'s values would get; ``config`` is left as it is."""
    if not isinstance(config, Config):
        raise ConfigError(f"config is a {type(config).__name__}; expected an mbpo.config.Config "
                          "(mbpo.config.load_config(path, overrides) makes one)")
    _check_types(config, "")
    validate(config)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The schema's annotations of ``cls``, resolved (once: they are strings under postponed annotations)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _check_types(section: Any, prefix: str) -> None:
    for field in dataclasses.fields(section):
        key, value, want = f"{prefix}{field.name}", getattr(section, field.name), _hints(type(section))[field.name]
        if isinstance(want, type) and dataclasses.is_dataclass(want):
            if not isinstance(value, want):
                raise ConfigError(f"{key} is a {type(value).__name__}; expected a section of keys "
                                  f"({want.__name__}, as the loaded config has)")
            _check_types(value, f"{key}.")
        elif not _fits(value, want):
            raise ConfigError(f"{key}={value!r} is a {type(value).__name__}; expected {_spelled(want)}")


def _fits(value: Any, want: Any) -> bool:
    """Whether ``value`` is of the annotation ``want`` (the schema's: scalars, X | None, list[X], tuple[...],
    dict[K, V], Any). An int fits a float key, as YAML's ``1`` does; a bool fits only a bool key.
    """
    if want is Any:
        return True
    origin, args = typing.get_origin(want), typing.get_args(want)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if want is type(None):
        return value is None
    if want is bool:
        return isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, (list, tuple)) and all(_fits(v, args[0]) for v in value)
    if origin is tuple:
        return isinstance(value, (list, tuple)) and len(value) == len(args) and all(map(_fits, value, args))
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    return isinstance(value, want) if isinstance(want, type) else True


def _spelled(want: Any) -> str:
    """``int``, ``float or None``, ``a list of int``: the annotation as the message says it."""
    origin, args = typing.get_origin(want), typing.get_args(want)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_spelled(arg) for arg in args)
    if want is type(None):
        return "None"
    if origin in (list, tuple, dict):
        return f"a {origin.__name__} of {', '.join(_spelled(a) for a in args)}"
    return getattr(want, "__name__", str(want))
