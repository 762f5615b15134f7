"""The trainers' tests run tiny async runs with the runtime tests' fixtures (tests/runtime/conftest.py)."""

from tests.runtime.conftest import backend, every_backend, no_leaks, thread_baseline, tiny_config

__all__ = ["backend", "every_backend", "no_leaks", "thread_baseline", "tiny_config"]
