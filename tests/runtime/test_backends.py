"""runtime.backend: the names the config accepts are exactly the backends make_backend builds."""

from __future__ import annotations

from typing import Any

import pytest

from mbpo.config.validation import _CHOICES
from mbpo.runtime.backends import BACKENDS, make_backend

pytestmark = pytest.mark.timeout(30)


def test_the_config_offers_exactly_the_backends_make_backend_chooses_from() -> None:
    assert _CHOICES["runtime.backend"] == BACKENDS


def test_a_name_that_is_no_backend_is_refused_naming_the_choices() -> None:
    unused: Any = None  # refused before any of these is looked at
    with pytest.raises(ValueError, match=r"runtime.backend='threads' is not a backend; expected one of thread, "
                                         r"process, ray"):
        make_backend("threads", unused, unused, unused, unused, num_collectors=1, env=unused, env_device="cpu",
                     env_seed=unused, action_seed=unused, thread_env=unused, template_snapshot=unused, ray=unused)
