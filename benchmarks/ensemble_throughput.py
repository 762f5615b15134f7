"""Dynamics-ensemble throughput (training and rollout sampling) against a matmul peak measured in the same run.

Prints one JSON line. Setup: MBPO's default ensemble (7 members, 4x200 SiLU,
batch 256 per member, 5 elites) on HalfCheetah-sized data (obs 17, act 6).

* training: ``mbpo.models.train_epoch`` (the inner loop of ``fit``: per-member
  bootstrap shuffle, gather, fused NLL + bound penalty + L2 loss, backward, fused Adam)
  in samples/s, where a sample is one (member, transition) pair; plus ``fit`` end to end
  (2 epochs, holdout evaluation included) once per precision.
* rollout: ``DynamicsEnsemble.sample`` on 100k start states (one model step through
  random elites), in transitions/s; and ``sample_scored`` (the same step, every elite predicting every
  row for its uncertainty: M2AC's masking, ``model.rollout_keep_fraction`` < 1) as a ratio to it.

FLOPs: 2 * in * out per linear layer per sample for a forward, x3 for training
(forward + backward). Elementwise work (SiLU, loss, Adam) is not counted, so the
fraction of peak is a lower bound on matmul efficiency. Peaks: a 1024x1024 ``torch.mm``
and a ``baddbmm`` of the hidden-layer shape ``[7, 256, 200] x [7, 200, 200]``, in fp32
and (where native) bf16. Measurements are interleaved and reported as medians.

    python benchmarks/ensemble_throughput.py [--threads 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from mbpo.config import ModelConfig
from mbpo.device.precision import bf16_autocast_supported
from mbpo.models import DynamicsEnsemble, train_epoch
from mbpo.run.logs import quiet_torchrl

OBS_DIM, ACT_DIM = 17, 6
TARGET_FRACTION = 0.5


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(fn: Callable[[], Any], device: torch.device, reps: int = 1) -> float:
    """Wall time of ``reps`` calls, divided by ``reps``."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / reps


def forward_flops(cfg: ModelConfig, in_dim: int, out_dim: int) -> int:
    sizes = [in_dim, *cfg.hidden_sizes, out_dim]
    return sum(2 * i * o for i, o in itertools.pairwise(sizes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved measurements per quantity")
    parser.add_argument("--train-steps", type=int, default=20, help="ensemble gradient steps per training measurement")
    parser.add_argument("--rollout-states", type=int, default=100_000, help="start states per sample() call")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    quiet_torchrl()  # torchrl logs to stdout: keep it one JSON line
    started = time.perf_counter()
    device = torch.device(args.device)
    precisions = ["fp32"] + (["bf16"] if bf16_autocast_supported(device) else [])
    cfg = ModelConfig()
    m, bs = cfg.ensemble_size, cfg.batch_size
    space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    g = torch.Generator(device).manual_seed(0)

    # Peaks: large square mm and the ensemble's own hidden-layer batched shape.
    h = cfg.hidden_sizes[0]
    a, b = torch.randn(1024, 1024, device=device, generator=g), torch.randn(1024, 1024, device=device, generator=g)
    x = torch.randn(m, bs, h, device=device, generator=g)
    w, bias = torch.randn(m, h, h, device=device, generator=g), torch.randn(m, 1, h, device=device, generator=g)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}
    peak_ops: dict[str, tuple[Callable[[], Any], float]] = {}
    for p in precisions:
        ap, bp, xp, wp, biasp = (t.to(dt[p]) for t in (a, b, x, w, bias))
        peak_ops[f"mm1024_{p}"] = (lambda ap=ap, bp=bp: torch.mm(ap, bp), 2 * 1024**3)
        peak_ops[f"bmm_{m}x{bs}x{h}x{h}_{p}"] = (
            lambda xp=xp, wp=wp, biasp=biasp: torch.baddbmm(biasp, xp, wp), 2 * m * bs * h * h)

    # Ensembles and data.
    fwd = forward_flops(cfg, OBS_DIM + ACT_DIM, 2 * (OBS_DIM + 1))
    n_train = args.train_steps * bs
    train_x = torch.randn(n_train, OBS_DIM + ACT_DIM, device=device, generator=g)
    train_t = torch.randn(n_train, OBS_DIM + 1, device=device, generator=g)
    boot = torch.randint(n_train, (m, n_train), device=device, generator=g)
    roll_obs = torch.randn(args.rollout_states, OBS_DIM, device=device, generator=g)
    roll_act = torch.rand(args.rollout_states, ACT_DIM, device=device, generator=g) * 2 - 1
    ensembles = {p: DynamicsEnsemble(cfg, OBS_DIM, space, device, seed=0, precision=p) for p in precisions}
    work: dict[str, Callable[[], Any]] = {}
    for p, ens in ensembles.items():
        work[f"train_{p}"] = lambda ens=ens: train_epoch(ens, train_x, train_t, None, boot)
        work[f"rollout_{p}"] = lambda ens=ens: ens.sample(roll_obs, roll_act, g)
        work[f"rollout_scored_{p}"] = lambda ens=ens: ens.sample_scored(roll_obs, roll_act, g)

    # Warm up, then interleave the repeats so machine noise hits everything alike.
    for fn, _ in peak_ops.values():
        seconds(fn, device, 3)
    for fn in work.values():
        seconds(fn, device)
    samples: dict[str, list[float]] = {k: [] for k in [*peak_ops, *work]}
    for _ in range(args.repeats):
        for name, (fn, _) in peak_ops.items():
            samples[name].append(seconds(fn, device, 20 if name.startswith("bmm") else 5))
        for name, fn in work.items():
            samples[name].append(seconds(fn, device))
    med = {k: statistics.median(v) for k, v in samples.items()}
    peaks = {k: round(flops / med[k] / 1e9, 1) for k, (_, flops) in peak_ops.items()}

    results: dict[str, Any] = {}
    met: dict[str, bool] = {}
    for p in ensembles:
        big, same = peaks[f"mm1024_{p}"], peaks[f"bmm_{m}x{bs}x{h}x{h}_{p}"]
        train_rate = m * n_train / med[f"train_{p}"]
        roll_rate = args.rollout_states / med[f"rollout_{p}"]
        fit_data = torch.randn(12_800, OBS_DIM, device=device, generator=g)
        fit_act = torch.rand(12_800, ACT_DIM, device=device, generator=g)
        fitter = DynamicsEnsemble(dataclasses.replace(cfg, max_epochs=2, patience=100), OBS_DIM, space, device,
                                  precision=p)
        fit_s = seconds(lambda f=fitter, x=fit_data, a=fit_act: f.fit(x, a, x[:, 0], x * 0.9, None), device)
        fit_rate = 2 * m * (12_800 - int(12_800 * cfg.holdout_ratio)) / fit_s
        for kind, rate, flops in (("training", train_rate, 3 * fwd), ("rollout", roll_rate, fwd)):
            gflops = rate * flops / 1e9
            row = results.setdefault(kind, {})
            row[p] = {
                ("samples_per_s" if kind == "training" else "transitions_per_s"): round(rate),
                "gflops": round(gflops, 1),
                "fraction_of_mm1024_peak": round(gflops / big, 3),
                "fraction_of_same_shape_bmm_peak": round(gflops / same, 3),
            }
            met[f"{kind}_{p}_vs_same_shape_bmm"] = gflops >= TARGET_FRACTION * same
            met[f"{kind}_{p}_vs_mm1024"] = gflops >= TARGET_FRACTION * big
        results["training"][p]["fit_samples_per_s"] = round(fit_rate)
        results["rollout"][p]["scored_over_plain_s"] = round(med[f"rollout_scored_{p}"] / med[f"rollout_{p}"], 2)

    print(json.dumps({
        "benchmark": "ensemble_throughput", "device": str(device), "threads": args.threads,
        "ensemble_size": m, "num_elites": cfg.num_elites, "hidden_sizes": cfg.hidden_sizes,
        "batch_size_per_member": bs, "obs_dim": OBS_DIM, "act_dim": ACT_DIM,
        "rollout_states": args.rollout_states, "train_steps_per_measurement": args.train_steps,
        "forward_flops_per_sample": fwd, "repeats": args.repeats, "peak_gflops": peaks, "results": results,
        "target_fraction_of_peak": TARGET_FRACTION, "targets_met": met, "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(), "wall_s": round(time.perf_counter() - started, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
