"""Checkpoints are atomic, pruned to the newest K, and a broken newest one falls back to the previous."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from mbpo import checkpoint as ckpt

pytestmark = pytest.mark.timeout(30)


def test_keeps_the_newest_k(tmp_path: Path) -> None:
    for step in (100, 200, 300, 400):
        ckpt.save_checkpoint(tmp_path, step, {"step": step}, keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["ckpt_000000000300.pt", "ckpt_000000000400.pt"]
    path, state = ckpt.load_latest(tmp_path)
    assert state == {"step": 400} and path.name.endswith("400.pt")


def test_crash_mid_write_leaves_the_previous_checkpoint_loadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt.save_checkpoint(tmp_path, 100, {"w": torch.ones(3)}, keep=3)
    real_save = torch.save

    def crash_half_way(obj: object, f: object) -> None:
        real_save({"partial": True}, f)
        raise OSError("disk full (injected)")

    monkeypatch.setattr(ckpt.torch, "save", crash_half_way)
    with pytest.raises(OSError, match="injected"):
        ckpt.save_checkpoint(tmp_path, 200, {"w": torch.zeros(3)}, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_000000000100.pt"]  # no temp, no partial
    _, state = ckpt.load_latest(tmp_path)
    assert torch.equal(state["w"], torch.ones(3))


def test_corrupt_newest_falls_back_with_a_warning(tmp_path: Path) -> None:
    ckpt.save_checkpoint(tmp_path, 100, {"step": 100}, keep=3)
    (tmp_path / "ckpt_000000000200.pt").write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match="could not be loaded"):
        path, state = ckpt.load_latest(tmp_path)
    assert state == {"step": 100}


def test_no_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.load_latest(tmp_path)


def test_rng_capture_restores_every_generator() -> None:
    state = ckpt.capture_rng()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    ckpt.restore_rng(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first
