"""A factory module whose own import fails: the user's error, which must keep its traceback."""

import not_an_installed_module_for_mbpo_tests  # noqa: F401


def make_env(num_envs: int) -> None:
    return None
