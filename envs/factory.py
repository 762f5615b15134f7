"""Envs from a user's callable named ``"package.module:callable"``, wrapped by type into one of our VecEnvs.

A name rather than the callable itself, so that a spawned process or a Ray actor can import the callable
and build its own env: only the string crosses a process boundary (the run config's ``env.factory``).

The callable is called with the keyword arguments it names among ``num_envs`` (it must take this one),
``device`` (a string: ``"cpu"``, ``"cuda:0"``) and ``seed`` (an int), plus the caller's ``kwargs``; names it
does not have are not passed (so ``gymnasium.make_vec`` works as it is: it takes ``num_envs``, and its
``**kwargs`` go to the env). What it returns is wrapped by type (:func:`as_vec_env`):

* one of our :class:`~envs.base.VecEnv`: as it is;
* a batched torchrl ``EnvBase``: :func:`envs.from_torchrl`;
* a gymnasium ``VectorEnv``: :class:`~envs.adapters.gymnasium_vector.GymnasiumVecEnv`, its tensors on ``device``;
* an rsl_rl ``VecEnv`` (Isaac Lab's and mjlab's ``RslRlVecEnvWrapper``): :func:`envs.from_rsl_rl`, reading the
  ``actor`` observation group, or ``policy`` (Isaac Lab's name) where there is no ``actor``.

To set an adapter's options (another observation group, an action limit), wrap the env yourself and return
the VecEnv. A wrong name, a missing attribute, a call the callable's signature cannot take, a return of
another type or one its adapter refuses is an :class:`EnvFactoryError` saying what was expected; an
exception raised by the user's own code (while its module imports, or inside the callable) is left as it
is, with its traceback.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch

from envs.base import VecEnv, check_num_envs
from envs.device import resolve_device

__all__ = ["EnvFactoryError", "load_factory", "make_from_factory", "as_vec_env", "EXPECTED_RETURN", "FACTORY_PATH"]

EXPECTED_RETURN = ("an envs.VecEnv, an rsl_rl VecEnv (Isaac Lab, mjlab), a batched torchrl EnvBase or a "
                   "gymnasium VectorEnv")
FACTORY_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
"""What a factory name looks like: dotted module path, a colon, dotted attribute path."""


class EnvFactoryError(TypeError):
    """An env factory name that does not resolve, a call it cannot take, or a return that is not an env.

    ``path`` is the factory's name (None from :func:`as_vec_env` on its own), ``problem`` what is wrong with it.
    """

    def __init__(self, path: str | None, problem: str) -> None:
        super().__init__(problem if path is None else f"env factory {path!r} {problem}")
        self.path, self.problem = path, problem

    def __reduce__(self) -> tuple[type, tuple[str | None, str]]:  # picklable, e.g. raised inside a Ray actor
        return type(self), (self.path, self.problem)


def load_factory(path: str) -> Callable[..., Any]:
    """The callable ``path`` (``"package.module:callable"``) names, checked to take ``num_envs``.

    The module is looked up on ``sys.path``, then in the current directory (as ``python -m`` would).
    """
    if not isinstance(path, str) or not FACTORY_PATH.match(path):
        raise EnvFactoryError(str(path), "is not of the form \"package.module:callable\" (e.g. "
                                         "examples.point_reach:make_env)")
    module_name, attr_path = path.split(":")
    obj: Any = _import(module_name, path)
    for i, attr in enumerate(attr_path.split(".")):
        if not hasattr(obj, attr):
            owner = module_name if i == 0 else f"{module_name}:{'.'.join(attr_path.split('.')[:i])}"
            close = difflib.get_close_matches(attr, [n for n in dir(obj) if not n.startswith("_")], n=3, cutoff=0.6)
            hint = f"; did you mean: {', '.join(close)}?" if close else ""
            raise EnvFactoryError(path, f"names nothing: {owner} has no attribute {attr!r}{hint}")
        obj = getattr(obj, attr)
    if not callable(obj):
        raise EnvFactoryError(path, f"is a {type(obj).__name__}, not a callable; expected a function or class "
                                    "that builds the env")
    if "num_envs" not in _named_parameters(obj):
        raise EnvFactoryError(path, f"takes no num_envs parameter ({_signature(obj)}); it must: training asks "
                                    "it for its batch of envs, evaluation for one env per episode")
    return obj


def make_from_factory(path: str, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                      **kwargs: Any) -> VecEnv:
    """Call the factory ``path`` names (see the module docstring) and wrap what it returns."""
    factory = load_factory(path)
    named = _named_parameters(factory)
    device = resolve_device(device)  # "auto" becomes what it means here; a missing GPU fails before any build
    passed = {"num_envs": check_num_envs(num_envs), "device": str(device), "seed": seed}
    call = {**kwargs, **{k: v for k, v in passed.items() if k in named}}
    try:
        inspect.signature(factory).bind(**call)
    except TypeError as exc:
        raise EnvFactoryError(path, f"cannot be called with {', '.join(sorted(call))} ({exc}); it takes "
                                    f"{_signature(factory)}") from None
    env = as_vec_env(factory(**call), device=device, seed=seed, path=path)
    if env.num_envs != num_envs:
        env.close()
        raise EnvFactoryError(path, f"built {env.num_envs} envs when asked for num_envs={num_envs}; expected "
                                    "exactly num_envs")
    return env


def as_vec_env(obj: Any, device: str | torch.device = "cpu", seed: int | None = None,
               path: str | None = None) -> VecEnv:
    """``obj`` as one of our VecEnvs, through the adapter its type calls for (see the module docstring).

    ``device`` is where a gymnasium vector env's tensors go (other kinds keep their own device); ``seed``
    applies at the first reset of an rsl_rl or gymnasium env (ours and torchrl's were built with theirs).
    ``path`` names the factory that built ``obj``, for the error when an adapter cannot take it.
    """
    if isinstance(obj, VecEnv):
        return obj
    adapter, kind = _adapter(obj, device, seed)
    what = "returned" if path is not None else "got"
    if adapter is None:
        batched = getattr(getattr(obj, "unwrapped", obj), "num_envs", None)  # before close(), which deletes the
        if callable(getattr(obj, "close", None)):  # scene Isaac Lab's reads it from
            obj.close()  # e.g. a single gymnasium env: its simulator must not outlive the error
        hint = ""
        if isinstance(obj, gym.Env) and isinstance(batched, int):  # Isaac Lab's gym.make(task), one env or many
            hint = (f" (a gymnasium env of {batched} envs, as Isaac Lab's gym.make(task, cfg=...) builds: return it "
                    "wrapped in Isaac Lab's RslRlVecEnvWrapper (isaaclab_rl.rsl_rl), an rsl_rl VecEnv)")
        elif isinstance(obj, gym.Env):
            hint = (" (a single gymnasium env: return gymnasium.make_vec(id, num_envs, vector_kwargs="
                    "{'autoreset_mode': gymnasium.vector.AutoresetMode.SAME_STEP}) or a VectorEnv of your own)")
        raise EnvFactoryError(path, f"{what} {type(obj).__module__}.{type(obj).__name__}{hint}; expected "
                                    f"{EXPECTED_RETURN}")
    try:
        return adapter()
    except (TypeError, ValueError, KeyError) as exc:  # the adapter's own check of the contract, one line
        if callable(getattr(obj, "close", None)):
            obj.close()
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise EnvFactoryError(path, f"{what} {kind} that does not fit our VecEnv contract: {message}") from exc


def _adapter(obj: Any, device: str | torch.device, seed: int | None) -> tuple[Callable[[], VecEnv] | None, str]:
    """``(build the wrapper, what obj is)``; ``(None, "")`` for a type no adapter takes."""
    from torchrl.envs import EnvBase

    from envs.adapters.rsl_rl import from_rsl_rl, is_rsl_rl_env

    if isinstance(obj, EnvBase):
        from envs.adapters.torchrl_env import from_torchrl

        return (lambda: from_torchrl(obj, seed=seed)), "a torchrl EnvBase"
    if isinstance(obj, gym.vector.VectorEnv):
        from envs.adapters.gymnasium_vector import GymnasiumVecEnv

        return (lambda: GymnasiumVecEnv(obj, device=device, seed=seed)), "a gymnasium VectorEnv"
    if is_rsl_rl_env(obj):
        return (lambda: from_rsl_rl(obj, seed=seed)), "an rsl_rl VecEnv"
    return None, ""


def _import(module_name: str, path: str) -> Any:
    """Import ``module_name``; a module that is not there is an EnvFactoryError, any other failure the user's."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # as `python -m mbpo` run from here would see it (last: never shadows a package)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not (module_name == missing or module_name.startswith(missing + ".")):
            raise  # the factory's module is there but imports one that is not: the user's, with its traceback
        if str(exc) != f"No module named {missing!r}":  # a finder's own reason (mbpo's: a user's envs package)
            raise EnvFactoryError(path, f"cannot be imported: {exc}") from None
        raise EnvFactoryError(path, f"cannot be imported: no module named {missing!r} on sys.path or in {cwd}; "
                                    "expected an importable \"package.module:callable\"") from None


def _named_parameters(fn: Callable[..., Any]) -> set[str]:
    """Parameter names ``fn`` takes by keyword (``**kwargs`` names none); empty where it has no signature."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in params if p.kind in kinds}


def _signature(fn: Callable[..., Any]) -> str:
    try:
        return f"{getattr(fn, '__name__', 'it')}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return "no inspectable signature"
