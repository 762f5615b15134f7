"""How well can a dynamics ensemble fit a finished run's real data, and where is its error?

Prints one JSON line. From a run's checkpoint it takes the real replay buffer, fits a fresh ensemble (the
run's ``model`` config, or a variant of it) on the first ``--split`` rows for ``--epochs`` epochs with no early
stopping, and after chosen epochs scores the elites' mean prediction on a random holdout of those rows and on
the next 2,500 rows (data the model never saw, as the run's ``model_err_delta`` scores each new batch). Errors
are MSE over the target's variance on the training rows, per state dimension and averaged (0 exact, about 1
no better than the mean). Variants, each against ``base`` (the run's config) in the same run:

* ``wdK``: the weight decays times K (overfitting would fall with more decay);
* ``wideW``: 4 hidden layers of W units (a model short of capacity would gain from width);
* ``betaB``: ``model.nll_beta`` B (beta-NLL: the mean fit harder where the model calls a target noisy);
* any of them with ``-std`` (``base-std``, ``beta0.5-std``): each state dimension rescaled so that its
  change per step has unit variance on the training rows, as if the ensemble standardised its targets (its
  inputs are standardised anyway, and the errors are per dimension over its variance, so only the fit sees
  the scale).

It answers whether a task's model error is the fit's (more epochs, more width) or the data's, and which state
dimensions carry it. At the last epoch it also asks whether the model knows where it is wrong: on the future
rows, how the rows' error ranks against uncertainties a rollout could drop branches by (the spread of the
elites' means; their predicted variance, as MOPO penalises; M2AC's one-vs-rest KL, which
``model.rollout_keep_fraction`` uses), and what error is left when only the most certain half, 80% or 90%
of rows are kept (against keeping the truly best rows, the bound). Threads: one (``--threads``), beside
other work.

    python benchmarks/model_fit_probe.py runs/<dir>/checkpoints/ckpt_000000030000.pt --epochs 150
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from mbpo.config import ModelConfig, config_from_yaml
from mbpo.models.ensemble import DynamicsEnsemble
from mbpo.models.sampling import one_vs_rest_kl
from mbpo.models.training import fit_data, holdout_split, select_elites, train_epoch
from mbpo.run.provenance import machine

FUTURE_ROWS = 2500
"""Rows after the split the model is scored on: one evaluation interval of the locomotion runs."""
REPORT_EPOCHS = (10, 40, 80, 150, 300)
KEEP_FRACTIONS = (0.5, 0.8, 0.9)


def variant_config(base: ModelConfig, variant: str) -> ModelConfig:
    """The run's model config with one change (``base``, ``wdK``, ``wideW``, ``betaB``)."""
    config = copy.deepcopy(base)
    decay, width = re.fullmatch(r"wd(\d+(?:\.\d+)?)", variant), re.fullmatch(r"wide([1-9]\d*)", variant)
    beta = re.fullmatch(r"beta(0(?:\.\d+)?|1(?:\.0*)?)", variant)
    if decay:
        config.weight_decay = [w * float(decay[1]) for w in config.weight_decay]
    elif width:
        config.hidden_sizes = [int(width[1])] * len(config.hidden_sizes)
    elif beta:
        config.nll_beta = float(beta[1])
    elif variant != "base":
        raise SystemExit(f"error: unknown variant {variant!r}; expected base, wdK (e.g. wd10), wideW (e.g. wide400) "
                         "or betaB (model.nll_beta, 0 to 1, e.g. beta0.5)")
    return config


def unit_deltas(rows: dict[str, torch.Tensor], split: int) -> dict[str, torch.Tensor]:
    """``rows`` with each state dimension divided by the std of its change per step over rows ``[0, split)``."""
    scale = (rows["next_obs"][:split] - rows["obs"][:split]).std(0).clamp_min(1e-8)
    return {**rows, "obs": rows["obs"] / scale, "next_obs": rows["next_obs"] / scale}


def per_dim_error(model: DynamicsEnsemble, elites: list[int], x: torch.Tensor, target: torch.Tensor,
                  var: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The elites' mean prediction's MSE per target dimension over ``var`` (state deltas, then the reward)."""
    return ((model.raw_rows(x)[0][elites].mean(0) - target) ** 2).mean(0) / var


def rank_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation (ties broken by order; the rows here are continuous)."""
    ra, rb = (v.argsort(stable=True).argsort().double() for v in (a, b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def kept_error(error: torch.Tensor, score: torch.Tensor, fraction: float) -> float:
    """Mean ``error`` of the ``fraction`` of rows with the lowest ``score``, over the mean error of all rows."""
    keep = score.argsort(stable=True)[: max(int(len(score) * fraction), 1)]
    return float(error[keep].mean() / error.mean())


def uncertainty_check(model: DynamicsEnsemble, elites: list[int], x: torch.Tensor, target: torch.Tensor,
                      var: torch.Tensor) -> dict[str, Any]:  # fmt: skip
    """Does an uncertainty the model gives rank the rows' true errors? Per row, over state dimensions (each
    over ``var``): the elites' mean prediction's squared error, the variance of the elites' means
    (disagreement) and the elites' mean predicted variance; and M2AC's one-vs-rest KL of a random elite
    against that elite's error (``one_vs_rest_kl``, with its own bound).
    """
    full_mean, full_logvar = (t[elites].float() for t in model.raw_rows(x)[:2])  # reward last
    mean, predicted = full_mean[..., :-1], full_logvar[..., :-1].exp()
    scale = var[:-1]
    error = ((mean.mean(0) - target[:, :-1]) ** 2 / scale).mean(-1)
    scores = {"disagreement": (mean.var(0, unbiased=False) / scale).mean(-1),
              "predicted_var": (predicted.mean(0) / scale).mean(-1)}
    result: dict[str, Any] = {name: {"rank_correlation": round(rank_correlation(score, error), 3),
                                     "kept_error": {str(f): round(kept_error(error, score, f), 3)
                                                    for f in KEEP_FRACTIONS}}
                              for name, score in scores.items()}
    result["bound_kept_error"] = {str(f): round(kept_error(error, error, f), 3) for f in KEEP_FRACTIONS}
    # What model.rollout_keep_fraction ranks by: each row through one random elite (seeded), scored by the
    # one-vs-rest KL over every predicted dimension, against that elite's own error (what a rollout stores).
    chosen = torch.randint(len(elites), (x.shape[0],), generator=torch.Generator().manual_seed(0))
    kl = one_vs_rest_kl(full_mean, full_logvar, chosen)
    own = ((mean[chosen, torch.arange(x.shape[0])] - target[:, :-1]) ** 2 / scale).mean(-1)
    result["one_vs_rest_kl"] = {"rank_correlation": round(rank_correlation(kl, own), 3),
                                "kept_error": {str(f): round(kept_error(own, kl, f), 3) for f in KEEP_FRACTIONS},
                                "bound_kept_error": {str(f): round(kept_error(own, own, f), 3)
                                                     for f in KEEP_FRACTIONS}}
    return result


def probe(rows: dict[str, torch.Tensor], model_config: ModelConfig, split: int, epochs: int, seed: int,
          precision: str) -> dict[str, Any]:  # fmt: skip
    """Fit a fresh ensemble on rows ``[0, split)``; score holdout and future rows after the reported epochs."""
    obs, action, reward, next_obs = rows["obs"], rows["action"], rows["reward"], rows["next_obs"]
    space = gym.spaces.Box(-1.0, 1.0, (action.shape[1],))
    model = DynamicsEnsemble(model_config, obs.shape[1], space, "cpu", seed=seed, precision=precision)
    past, future = slice(0, split), slice(split, split + FUTURE_ROWS)
    x, target, _, _ = fit_data(model, obs[past], action[past], reward[past], next_obs[past], None, None)
    gen = torch.Generator().manual_seed(seed)
    hold, train = holdout_split(split, model_config, gen)
    model.normalizer.fit(x[train])
    x = model.normalizer.normalize(x)
    boot = torch.randint(len(train), (model.ensemble_size, len(train)), generator=gen)
    x_future = model.normalizer.normalize(model.inputs(obs[future], action[future]))
    t_future = model.targets(obs[future], reward[future], next_obs[future])
    var = target.var(0)
    curve, start = [], time.perf_counter()
    uncertainty: dict[str, Any] = {}
    for epoch in range(1, epochs + 1):
        model.train()
        train_epoch(model, x[train], target[train], None, boot)
        model.eval()
        if epoch not in REPORT_EPOCHS and epoch != epochs:
            continue
        with torch.no_grad():
            elites = select_elites(model.prediction_mse(x[hold], target[hold]), model.num_elites)
            err_hold = per_dim_error(model, elites, x[hold], target[hold], var)
            err_future = per_dim_error(model, elites, x_future, t_future, var)
            if epoch == epochs:
                uncertainty = uncertainty_check(model, elites, x_future, t_future, var)
        curve.append({"epoch": epoch, "holdout": round(float(err_hold[:-1].mean()), 4),
                      "future": round(float(err_future[:-1].mean()), 4),
                      "future_reward": round(float(err_future[-1]), 4),
                      "s": round(time.perf_counter() - start, 1)})
        print(f"[model_fit_probe] {curve[-1]}", flush=True)
    return {"curve": curve, "future_per_dim": [round(float(v), 3) for v in err_future[:-1]],
            "holdout_per_dim": [round(float(v), 3) for v in err_hold[:-1]], "future_uncertainty": uncertainty}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a run's checkpoint (it holds the real replay buffer)")
    parser.add_argument("--split", type=int, default=25000, help="fit on rows [0, split), score the next 2,500")
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--variants", default="base,wd10,wide400")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    for variant in variants:  # a typo stops here, not after the load and the first variant's minutes
        variant_config(ModelConfig(), variant.removesuffix("-std"))
    if not args.checkpoint.is_file():
        raise SystemExit(f"error: no file at {args.checkpoint}; expected a run's checkpoint, "
                         "e.g. runs/<dir>/checkpoints/ckpt_000000030000.pt")
    ckpt = torch.load(args.checkpoint, weights_only=False, map_location="cpu")  # our own run's file
    config = config_from_yaml(ckpt["config"])
    data, written = ckpt["buffer"]["data"], int(ckpt["buffer"]["writer"]["_write_count"])
    if written < args.split + FUTURE_ROWS or written > len(data["obs"]):
        raise SystemExit(f"error: the checkpoint holds {written} real rows (a full ring buffer is not supported); "
                         f"--split {args.split} needs at least {args.split + FUTURE_ROWS}")
    rows = {k: data[k][:written] for k in ("obs", "action", "reward", "next_obs", "next_obs_valid")}
    if not bool(rows["next_obs_valid"].all()):
        raise SystemExit("error: some rows lack their true next observation; this probe needs every one")
    result: dict[str, Any] = {"benchmark": "model_fit_probe", "checkpoint": str(args.checkpoint),
                              "env": config.env.id, "split": args.split, "future_rows": FUTURE_ROWS,
                              "epochs": args.epochs, "precision": args.precision, "threads": args.threads,
                              "machine": machine(), "variants": {}}
    for variant in variants:
        print(f"[model_fit_probe] {variant}", flush=True)
        name = variant.removesuffix("-std")
        data = unit_deltas(rows, args.split) if name != variant else rows
        result["variants"][variant] = probe(data, variant_config(config.model, name), args.split, args.epochs,
                                            args.seed, args.precision)
    base = result["variants"].get("base")
    if base is not None:
        for v in result["variants"].values():
            v["future_over_base"] = round(v["curve"][-1]["future"] / base["curve"][-1]["future"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
