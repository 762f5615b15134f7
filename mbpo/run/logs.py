"""One switch for third-party log noise."""

from __future__ import annotations

import logging


def quiet_torchrl() -> None:
    """torchrl logs INFO lines to stdout (breaking one-JSON-line output and the progress bar).

    It sets its logger's level when first imported, so import it before lowering it.
    """
    import torchrl  # noqa: F401 - imported for its side effect (it sets its logger's level)

    logging.getLogger("torchrl").setLevel(logging.WARNING)
