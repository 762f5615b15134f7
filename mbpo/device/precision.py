"""``precision: auto``: bf16 where the device computes it natively, fp32 elsewhere, decided once at start-up.

bf16 autocast halves an update's time only where the hardware has bf16 arithmetic: CUDA compute
capability 8.0+, or a CPU with AVX512-BF16 or AMX-BF16 (measured 2.0x on an AVX512-BF16 EPYC and
1.7-2.0x on AMX Xeons for SAC's 256x256 update). Elsewhere (AVX2-only or plain AVX-512 CPUs) oneDNN
emulates it, at fp32 speed or worse, so ``auto`` picks fp32 there. The decision reads CPU flags, not a
timing, so the same machine always decides the same way; the trainer writes the resolved value into the
run's config (a resume keeps it, or takes another: a run moved to a machine without native bf16 resumes with
``agent.sac.precision=fp32 model.precision=fp32``) and prints why.
"""

from __future__ import annotations

import torch

__all__ = ["PRECISIONS", "bf16_autocast_supported", "native_bf16", "resolve_precision"]

PRECISIONS = ("auto", "fp32", "bf16")


def native_bf16(device: torch.device | str) -> tuple[bool, str]:
    """Whether ``device`` computes bf16 natively, and what that answer rests on (for the start-up line)."""
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return False, "CUDA is not available"
        major, minor = torch.cuda.get_device_capability(device)
        ok = major >= 8  # native bf16 from Ampere on; is_bf16_supported() would answer for the current device
        return ok, f"{torch.cuda.get_device_name(device)}, compute capability {major}.{minor}"
    if device.type == "cpu":
        flags = [name for name, has in (("AVX512_BF16", torch.cpu._is_avx512_bf16_supported()),
                                        ("AMX", torch.cpu._is_amx_tile_supported())) if has]
        mkldnn = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        if flags and mkldnn:
            return True, f"CPU has {' and '.join(flags)}"
        if flags:
            return False, f"CPU has {' and '.join(flags)} but this torch build's oneDNN cannot use it"
        return False, f"CPU has neither AVX512_BF16 nor AMX (torch sees {torch.backends.cpu.get_cpu_capability()})"
    return False, f"bf16 autocast is only used on cpu and cuda here, not {device.type}"


def bf16_autocast_supported(device: torch.device | str) -> bool:
    """Whether bf16 autocast runs natively on ``device`` (not emulated at fp32 speed or worse)."""
    return native_bf16(device)[0]


def resolve_precision(requested: str, device: torch.device | str, key: str) -> tuple[str, str]:
    """``(fp32 | bf16, why)`` for ``requested`` (auto, fp32 or bf16) of config ``key`` on ``device``.

    An explicit bf16 on a device without native bf16 is refused (it would run slower than fp32).
    """
    if requested not in PRECISIONS:
        raise ValueError(f"{key}={requested!r} is not allowed; expected one of {', '.join(PRECISIONS)}")
    if requested == "fp32":
        return "fp32", "as configured"
    ok, why = native_bf16(device)
    if requested == "bf16":
        if not ok:
            raise ValueError(f"{key}=bf16 was requested but {torch.device(device)} has no native bf16 ({why}); "
                             f"set {key}=fp32 or auto (a resume takes it too: the weights are fp32 either way)")
        return "bf16", f"as configured ({why})"
    return ("bf16" if ok else "fp32"), f"auto: {why}"
