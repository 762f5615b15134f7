"""Import a user's callable by name, ``"package.module:attr"``, for config keys that hand over code.

Config files and the command line carry plain strings; a key such as ``model.termination`` names
the function instead of holding it. Every failure (bad syntax, a module that does not import, a
missing attribute, something that is not callable) is one :class:`~mbpo.config.ConfigError` line that
names the key and says what was expected.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from mbpo.config import ConfigError
from mbpo.config.validation import CALLABLE_PATH

__all__ = ["load_callable"]


def load_callable(path: str, what: str) -> Callable[..., Any]:
    """The callable that ``path`` (``"package.module:attr"``) names; ``what`` is the config key, for errors."""
    if not CALLABLE_PATH.match(path):
        raise ConfigError(f"{what}={path!r} is not a callable's path; expected 'package.module:callable'")
    module_name, attr = path.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # any failure of the user's module (ImportError, SyntaxError, ...) is one line
        raise ConfigError(f"{what}={path!r}: importing {module_name!r} failed with {type(exc).__name__}: {exc}; "
                          "expected a module importable from this Python (installed, or on PYTHONPATH)") from exc
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            owner = module_name if i == 0 else f"{module_name}:{'.'.join(attr.split('.')[:i])}"
            raise ConfigError(f"{what}={path!r}: {owner!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{what}={path!r} is a {type(obj).__name__}, not a callable")
    return obj
