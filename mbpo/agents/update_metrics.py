"""SAC's per-update metrics: kept on the device, read by the host only when asked (no sync per update)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

__all__ = ["METRIC_NAMES", "ACTOR_METRICS", "UpdateMetrics"]

METRIC_NAMES = (
    "loss_critic",
    "loss_actor",
    "loss_alpha",
    "alpha",
    "q_mean",
    "entropy",
    "grad_norm_critic",
    "grad_norm_actor",
    "grad_norm_alpha",
)
"""Per-update metrics, in the order of the on-device metric vector. Grad norms are before clipping."""
ACTOR_METRICS = frozenset({"loss_actor", "loss_alpha", "entropy", "grad_norm_actor", "grad_norm_alpha"})
"""The metrics of the actor and alpha step, which a policy delay (agent.sac.policy_delay) skips on most updates:
their means are over the updates that made that step."""


class UpdateMetrics(Mapping[str, float]):
    """``update()``'s metrics: a read-only ``{name: float}`` that syncs with the device only when read.

    Reading any value copies the whole metric vector to the host once (one sync);
    a caller that ignores the metrics (or uses :meth:`SAC.pop_metrics` every few
    hundred updates) never waits for the device. ``skipped`` is 1.0 if this
    update's step was skipped for a non-finite loss or gradient.
    """

    __slots__ = ("_values", "_floats")
    _names = (*METRIC_NAMES, "skipped")

    def __init__(self, values: torch.Tensor) -> None:
        self._values = values
        self._floats: dict[str, float] | None = None

    def _host(self) -> dict[str, float]:
        if self._floats is None:
            self._floats = dict(zip(self._names, self._values.tolist(), strict=True))
        return self._floats

    def __getitem__(self, key: str) -> float:
        return self._host()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"UpdateMetrics({self._host()})"
