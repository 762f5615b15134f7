"""mbpo.device.precision: where bf16 is native, asked of the device the run names."""

from __future__ import annotations

import pytest
import torch

from mbpo.device import precision

pytestmark = pytest.mark.timeout(30)


def test_native_bf16_of_a_gpu_is_that_gpus_not_the_current_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """``device=cuda:1`` (a V100 beside an A100 at cuda:0): ``is_bf16_supported`` answers for the current device,
    so auto chose bf16 and an explicit bf16 was accepted on a GPU without it.
    """
    capability = {0: (8, 0), 1: (7, 0)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability[torch.device(device).index])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"GPU {torch.device(device).index}")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # cuda:0's answer
    assert precision.native_bf16("cuda:1") == (False, "GPU 1, compute capability 7.0")
    assert precision.native_bf16("cuda:0") == (True, "GPU 0, compute capability 8.0")
