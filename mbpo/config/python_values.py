"""A Config built or changed in Python (``cfg.agent.sac.gamma = 1.5``), held to what a config file is held to:
each value of its key's type (OmegaConf's part for a file), then :func:`~mbpo.config.validation.validate`.
Unchecked, such a run trained on a gamma above 1 (its checkpoint, read back through the checks, then refused by
resume), or failed far from the cause (a ZeroDivisionError for batch_size 0, a TypeError for a str). A trainer
takes its own checked copy (:func:`checked_copy`): what it resolves stays out of the caller's object, and what the
caller changes afterwards (a sweep's next seed) stays out of a run built from it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from typing import Any

from mbpo.config.schema import Config, ConfigError
from mbpo.config.validation import validate

__all__ = ["check", "checked_copy"]


def check(config: Config) -> None:
    """Raise the ConfigError a config file with ``config``'s values would get; ``config`` is left as it is (a
    path-like ``run_dir``, ``tmp_path / "run"``, stands for its str).
    """
    checked_copy(config)


def checked_copy(config: Config) -> Config:
    """A copy of ``config`` for a run to own, held to what a config file is (:func:`check`), its path-like
    ``run_dir`` taken as its str as a file's is. Values are checked before the copy, so that one a file cannot hold
    is named rather than failing to copy.
    """
    if not isinstance(config, Config):
        raise ConfigError(f"config is a {type(config).__name__}; expected an mbpo.config.Config "
                          "(mbpo.config.load_config(path, overrides) makes one)")
    _check_types(config, "")
    own = copy.deepcopy(config)
    if isinstance(own.run_dir, os.PathLike):
        own.run_dir = os.fspath(own.run_dir)
    validate(own)
    return own


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The schema's annotations of ``cls``, resolved (once: they are strings under postponed annotations)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _check_types(section: Any, prefix: str) -> None:
    for field in dataclasses.fields(section):
        key, value, want = f"{prefix}{field.name}", getattr(section, field.name), _hints(type(section))[field.name]
        if key == "run_dir" and isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(want, type) and dataclasses.is_dataclass(want):
            if not isinstance(value, want):
                raise ConfigError(f"{key} is of type {_type(value)}; expected a section of keys ({want.__name__}, "
                                  "as the loaded config has)")
            _check_types(value, f"{key}.")
            continue
        problem = _problem(value, want, key)
        if problem is not None:
            raise ConfigError(problem)


SCALARS: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float), str: (str,),
                                        type(None): (type(None),)}
"""The exact types a key of each annotation takes (YAML's: a numpy scalar or a bool in an int key is not one,
and OmegaConf refused it later, when the run wrote its config); an int fits a float key, as YAML's ``1`` does."""


def _problem(value: Any, want: Any, key: str) -> str | None:
    """None where ``value`` is of the annotation ``want`` (the schema's: scalars, X | None, list[X], dict[K, V],
    Any); else the message, naming the innermost key (``agent.sac.hidden_sizes[1]``).
    """
    origin, args = typing.get_origin(want), typing.get_args(want)
    if origin in (typing.Union, types.UnionType):
        if any(_problem(value, arg, key) is None for arg in args):
            return None
        others = [arg for arg in args if arg is not type(None)]
        return (_problem(value, others[0], key) if len(others) == 1 and value is not None else
                f"{key}={value!r} is of type {_type(value)}; expected {_spelled(want)}")
    if want is Any:
        return _plain_problem(value, key)
    if want in SCALARS:
        return None if type(value) in SCALARS[want] else f"{key}={value!r} is of type {_type(value)}; expected " \
                                                         f"{_spelled(want)}"
    if origin in (list, dict):
        if type(value) is not origin:
            return f"{key}={value!r} is of type {_type(value)}; expected {_spelled(want)}"
        items = enumerate(value) if origin is list else value.items()
        for index, item in items:
            problem = (_problem(index, args[0], f"{key} key") if origin is dict else None) or \
                _problem(item, args[-1], f"{key}[{index!r}]")
            if problem is not None:
                return problem
        return None
    return None if not isinstance(want, type) or isinstance(value, want) else \
        f"{key}={value!r} is of type {_type(value)}; expected {_spelled(want)}"


def _plain_problem(value: Any, key: str) -> str | None:
    """None where ``value`` is what a config file can hold (it is written to config.yaml, and read back on
    resume): None, a bool, int, float or str, or lists and str-keyed mappings of them.
    """
    if type(value) in (type(None), bool, int, float, str):
        return None
    if type(value) in (list, tuple):
        return next((p for i, v in enumerate(value) if (p := _plain_problem(v, f"{key}[{i}]")) is not None), None)
    if type(value) is dict:
        for k, v in value.items():
            problem = _plain_problem(v, f"{key}[{k!r}]") if type(k) is str else \
                f"{key} has the key {k!r} of type {_type(k)}; expected str keys"
            if problem is not None:
                return problem
        return None
    return (f"{key}={value!r} is of type {_type(value)}; expected what a config file can hold (None, a bool, int, "
            "float or str, or lists and mappings of them): the config is written to the run's config.yaml and read "
            "back on resume")


def _type(value: Any) -> str:
    """``str``, ``numpy.float64``: a value's type as the message names it."""
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _spelled(want: Any) -> str:
    """``int``, ``float or None``, ``a list of int``: the annotation as the message says it."""
    origin, args = typing.get_origin(want), typing.get_args(want)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_spelled(arg) for arg in args)
    if want is type(None):
        return "None"
    if origin in (list, dict):
        return f"a {origin.__name__} of {' to '.join(_spelled(a) for a in args)}"
    return getattr(want, "__name__", str(want))
