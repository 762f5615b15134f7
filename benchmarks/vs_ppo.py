"""Cheap samples or expensive ones: rsl_rl's PPO against our SAC and MBPO, same envs, same run, one at a time.

For each learner: env steps and training wall-clock (evaluation excluded) until the 50-episode
deterministic evaluation return reaches the threshold and stays there (``--stay`` evaluations in a
row at or above it; the reach is the first of them), and where the time went (env, acting, update,
model). Learners, one after another on the same machine:

* ``ppo``: rsl_rl's ``OnPolicyRunner`` on our native env through ``envs.to_rsl_rl``, with the settings of
  mjlab's cartpole PPO config (``envs.adapters.rsl_rl_export.ppo_train_cfg``: 64x64 ELU, 32 steps per env,
  5 epochs x 4 mini-batches, adaptive lr 1e-3), evaluated every iteration (every 4th on mjlab);
* ``sac_scale`` / ``mbpo_scale``: our scale configs (``configs/<env>_{sac,mbpo}_<N>.yaml``);
* ``sac_single`` / ``mbpo_single``: our small configs (one env for Pendulum).

Ours run as ``python -m mbpo train`` subprocesses with ``eval_episodes=50``; a learner stops at its
stay criterion or at ``--minutes`` (then it has not reached, and says so). Envs: native Pendulum-v1
at 1,024 envs (threshold -200) and mjlab Cartpole-Balance at 256 (threshold 45; needs the mjlab extra).
Prints one JSON line, writes ``vs_ppo_<env>.png`` (wall-clock against env steps, log-log) to ``--out``.
On a GPU machine: ``--device cuda --num-envs 4096``.

``--sim-cost-us C`` (default 0) makes every learner's training env cost what a slower simulator would: each
vector step waits ``C x num_envs`` microseconds inside ``env.step`` (``envs.sim_cost``: sleep, then a spin for
the last 0.3 ms), so it counts as env time in each learner's breakdown. PPO's env is wrapped in-process; ours
build it from ``env.factory=envs.sim_cost:slowed`` (its ``env.id`` becomes a label such as
``SimCost100us-Pendulum-v1``, and an MBPO run is handed the known termination rule that label would lose), so
every backend's collectors step the same slowed env. Evaluation envs are not slowed (evaluation is not
training time). The JSON gives ``sim_cost_us`` and, per learner, ``crossover_us``: the cost above which it
reaches the threshold in less wall-clock than PPO, from this run's curves (:func:`crossover_us` has the model).

``--keep-runs DIR`` keeps our learners' run dirs (config.yaml, metrics.csv, run.json) in ``DIR/<env>/<learner>``.

    python benchmarks/vs_ppo.py [--env pendulum] [--minutes 6] [--stay 3] [--seed 0] [--sim-cost-us 0] [--out DIR]
                                [--keep-runs DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

import envs  # noqa: E402
from envs.adapters.rsl_rl_export import ppo_train_cfg  # noqa: E402
from envs.sim_cost import EXPECTED_COST, SimCostEnv, check_cost_us  # noqa: E402
from mbpo.agents.base import Agent  # noqa: E402
from mbpo.config import load_config  # noqa: E402
from mbpo.config.callables import load_callable  # noqa: E402
from mbpo.models.termination import known_termination  # noqa: E402
from mbpo.run.evaluation import evaluate  # noqa: E402

EVAL_EPISODES = 50


@dataclass(frozen=True)
class Task:
    env_id: str
    num_envs: int
    threshold: float
    configs: dict[str, tuple[str, list[str]]]
    """Our learners: config file and overrides."""
    ppo_eval_every: int = 1
    """PPO iterations between evaluations (a 50-episode evaluation of 1,000-step episodes is not free)."""


TASKS = {
    "pendulum": Task("Pendulum-v1", 1024, -200.0, {
        "sac_scale": ("pendulum_sac_1024.yaml", []),
        "mbpo_scale": ("pendulum_mbpo_1024.yaml", []),
        "sac_single": ("pendulum_sac.yaml", ["total_env_steps=50000"]),
        "mbpo_single": ("pendulum_mbpo.yaml", ["total_env_steps=20000"]),
    }),
    "mjlab_cartpole": Task("Mjlab-Cartpole-Balance", 256, 45.0, {
        "sac_scale": ("mjlab_cartpole_sac_256.yaml", []),
        "mbpo_scale": ("mjlab_cartpole_mbpo_256.yaml", []),
        "sac_single": ("mjlab_cartpole_mbpo.yaml", ["model.enabled=false", "agent.utd_ratio=1"]),
        "mbpo_single": ("mjlab_cartpole_mbpo.yaml", []),
    }, ppo_eval_every=4),
}


@dataclass
class Curve:
    """Evaluations of one learner: (env steps, training seconds, return), and where its time went."""

    points: list[tuple[int, float, float]] = field(default_factory=list)
    time_s: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def reached(self, threshold: float, stay: int) -> tuple[int, float] | None:
        """(env steps, seconds) at the first of ``stay`` evaluations in a row at or above ``threshold``,
        with none below it afterwards.
        """
        for i in range(len(self.points) - stay + 1):
            if all(r >= threshold for _, _, r in self.points[i:]):
                return self.points[i][0], self.points[i][1]
        return None

    def summary(self, threshold: float, stay: int) -> dict[str, Any]:
        hit = self.reached(threshold, stay)
        last = self.points[-1] if self.points else (0, 0.0, float("nan"))
        return {"reached": hit is not None, "env_steps_to_threshold": hit[0] if hit else None,
                "train_s_to_threshold": round(hit[1], 1) if hit else None, "env_steps": last[0],
                "train_s": round(last[1], 1), "last_eval_return": round(last[2], 1),
                "time_s": {k: round(v, 1) for k, v in self.time_s.items()}, "evaluations": len(self.points),
                **({"note": self.note} if self.note else {})}


def stays(curve: Curve, threshold: float, stay: int) -> bool:
    return len(curve.points) >= stay and all(r >= threshold for _, _, r in curve.points[-stay:])


class _Timed:
    """Wraps a callable and adds its seconds to ``totals[part]``."""

    def __init__(self, fn: Callable[..., Any], totals: dict[str, float], part: str) -> None:
        self.fn, self.totals, self.part = fn, totals, part

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.totals[self.part] += time.perf_counter() - start


class _PPOActor:
    """rsl_rl's deterministic policy behind our ``act(obs, explore)``, for mbpo.run.evaluation.evaluate."""

    def __init__(self, runner: Any, env: envs.VecEnv) -> None:
        from tensordict import TensorDict

        self.policy, self.TensorDict, self.device = runner.get_inference_policy(), TensorDict, runner.device
        space = env.action_space
        assert isinstance(space, gym.spaces.Box), f"PPO here is for Box actions, not {space}"
        self.low = torch.as_tensor(space.low, dtype=torch.float32)
        self.high = torch.as_tensor(space.high, dtype=torch.float32)

    def act(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """CPU obs in, CPU actions out (the evaluation loop's contract), the policy on the runner's device."""
        with torch.inference_mode():
            actions = self.policy(self.TensorDict({"policy": obs.to(self.device)}, batch_size=[obs.shape[0]]))
        return actions.cpu().clamp(self.low, self.high)


def run_ppo(task: Task, args: argparse.Namespace) -> Curve:
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    env = ppo_env(task, args)
    eval_env = envs.make(task.env_id, EVAL_EPISODES, device=args.device, seed=args.seed + 1)
    exported = envs.to_rsl_rl(env)
    runner = OnPolicyRunner(exported, ppo_train_cfg(), log_dir=None, device=args.device)
    totals = dict.fromkeys(("env", "act", "update"), 0.0)
    exported.step = _Timed(exported.step, totals, "env")
    runner.alg.act = _Timed(runner.alg.act, totals, "act")
    runner.alg.update = _Timed(runner.alg.update, totals, "update")
    runner.alg.compute_returns = _Timed(runner.alg.compute_returns, totals, "update")
    curve, train_s, steps_per_iter = Curve(), 0.0, exported.num_envs * ppo_train_cfg()["num_steps_per_env"]
    deadline = time.perf_counter() + 60 * args.minutes
    iteration = 0
    while time.perf_counter() < deadline and not stays(curve, task.threshold, args.stay):
        start = time.perf_counter()
        runner.learn(1)
        train_s += time.perf_counter() - start
        iteration += 1
        if iteration % task.ppo_eval_every:
            continue
        actor = cast(Agent, _PPOActor(runner, eval_env))  # evaluate() only calls act()
        ret = float(np.mean(evaluate(actor, eval_env, seed=args.seed + 10 + iteration)))
        curve.points.append((iteration * steps_per_iter, train_s, ret))
    curve.time_s = {**totals, "train": train_s}
    env.close()
    eval_env.close()
    return curve


def ppo_env(task: Task, args: argparse.Namespace) -> envs.VecEnv:
    """PPO's training env: the native one, slowed by ``--sim-cost-us`` where it is above 0."""
    env = envs.make(task.env_id, args.num_envs or task.num_envs, device=args.device, seed=args.seed)
    return SimCostEnv(env, args.sim_cost_us) if args.sim_cost_us else env


def learner_overrides(task: Task, name: str, args: argparse.Namespace) -> list[str]:
    """The command-line overrides of our learner ``name``: its own, the scale's ``--num-envs``, and the slowed
    env of ``--sim-cost-us`` (:func:`sim_cost_overrides`).
    """
    config, overrides = task.configs[name]
    own = [*overrides, *([f"env.num_envs={args.num_envs}"] if name.endswith("_scale") and args.num_envs else [])]
    return [*own, *sim_cost_overrides(ROOT / "configs" / config, own, args.sim_cost_us)]


def sim_cost_overrides(config_path: Path, overrides: list[str], cost_us: float) -> list[str]:
    """Overrides that build the run's training env through ``envs.sim_cost:slowed`` at ``cost_us`` (none at 0).

    With ``env.factory``, ``env.id`` is only a label, which must not name a built-in env; so the run would lose
    the termination rule known for the real id (``mbpo.models.termination``) and learn one instead. An MBPO
    run is handed that rule by name (``model.termination``), so it learns what it learns without the cost.
    """
    if not cost_us:
        return []
    cfg = load_config(config_path, overrides)
    env = cfg.env
    if env.factory is not None:
        raise ValueError(f"{config_path.name} builds its env with env.factory={env.factory!r}; --sim-cost-us wraps "
                         "built-in env ids only")
    kwargs = {"env_id": env.id, "cost_us": cost_us, "source": env.source, "only_num_envs": env.num_envs}
    out = [f"env.id=SimCost{cost_us:g}us-{env.id}", "env.factory=envs.sim_cost:slowed", "env.source=auto",
           *(f"env.kwargs.{k}={v}" for k, v in kwargs.items())]
    known = known_termination(env.id)
    if cfg.model.enabled and cfg.model.termination is None and not cfg.model.learned_termination and known:
        path = f"{known.__module__}:{known.__qualname__}"
        if "<" in path or load_callable(path, "model.termination") is not known:
            raise ValueError(f"the known termination rule for {env.id} ({path}) cannot be named; a slowed run "
                             "would learn one instead")
        out.append(f"model.termination={path}")
    return out


def run_ours(task: Task, name: str, args: argparse.Namespace, run_root: Path) -> Curve:
    config = task.configs[name][0]
    run_dir = run_root / name
    cmd = [sys.executable, "-m", "mbpo", "train", "--config", str(ROOT / "configs" / config), f"run_dir={run_dir}",
           f"seed={args.seed}", f"device={args.device}", "progress=false", f"eval_episodes={EVAL_EPISODES}",
           "checkpoint.every=100000000", *learner_overrides(task, name, args)]
    log = run_root / f"{name}.stderr"  # a file, not a pipe: a chatty env cannot fill a pipe and stall the run
    with open(log, "w") as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.perf_counter() + 60 * args.minutes
    curve, note = Curve(), ""
    while proc.poll() is None:
        curve = read_curve(run_dir / "metrics.csv")
        if stays(curve, task.threshold, args.stay):
            note = "stopped once it stayed at the threshold"
            break
        if time.perf_counter() > deadline:
            note = f"stopped at the {args.minutes}-minute limit"
            break
        time.sleep(1.0)  # polling a file another process writes: nothing to synchronise with
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the trainer drains, logs a last row and exits
    proc.wait()
    if proc.returncode not in (0, 143, -signal.SIGTERM):
        raise RuntimeError(f"{name} exited {proc.returncode}: {log.read_text().strip().splitlines()[-1:]}")
    curve = read_curve(run_dir / "metrics.csv")
    curve.note = note or "ran its config's total_env_steps"
    return curve


def read_curve(path: Path) -> Curve:
    """Evaluations from a run's metrics.csv, on training seconds (wall-clock minus evaluation time)."""
    curve = Curve()
    if not path.exists():
        return curve
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if r.get("eval_return"):
            train_s = float(r["wall_s"]) - float(r.get("time_eval_s") or 0.0)
            curve.points.append((int(r["env_steps"]), train_s, float(r["eval_return"])))
    if rows:
        last = rows[-1]
        curve.time_s = {k[5:-2]: float(v) for k, v in last.items() if k.startswith("time_") and v}
        curve.time_s["train"] = float(last["wall_s"]) - curve.time_s.get("eval", 0.0)
    return curve


def chart(task: Task, curves: dict[str, Curve], stay: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, curve in curves.items():
        if not curve.points:
            continue
        xs, ys = [p[0] for p in curve.points], [max(p[1], 0.1) for p in curve.points]
        line = ax.plot(xs, ys, marker=".", label=name)[0]
        hit = curve.reached(task.threshold, stay)
        if hit:
            ax.plot([hit[0]], [max(hit[1], 0.1)], marker="*", markersize=14, color=line.get_color())
    ax.set(xscale="log", yscale="log", xlabel="env steps", ylabel="training wall-clock (s)",
           title=f"{task.env_id}: each evaluation; star = reached {task.threshold:g} and stayed")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """Each learner's env steps and training seconds to the threshold over PPO's (None where one did not reach)."""
    ppo = results["ppo"]
    out: dict[str, Any] = {}
    for name, r in results.items():
        if name == "ppo":
            continue
        both = r["reached"] and ppo["reached"]
        out[name] = {"env_steps_vs_ppo": round(r["env_steps_to_threshold"] / ppo["env_steps_to_threshold"], 4)
                     if both else None,
                     "train_s_vs_ppo": round(r["train_s_to_threshold"] / max(ppo["train_s_to_threshold"], 1e-9), 2)
                     if both else None}
    return out


def crossover_us(learner: dict[str, Any], ppo: dict[str, Any], cost_us: float) -> float | str | None:
    """The simulator cost (µs per env transition) above which ``learner`` reaches the threshold in less
    wall-clock than PPO, from one run of each at ``cost_us`` (both :meth:`Curve.summary` dicts).

    The model: a learner that reached the threshold in n env steps and t training seconds at cost C (µs) needs
    t + (C' - C) n / 1e6 seconds at cost C', as a change of cost changes the time of every env step and nothing
    else. That holds where env steps do not overlap other work (PPO, the sync trainer). An async trainer's
    collectors step while its learner updates, so part of a dearer sim hides behind the learner and the model
    overstates its wall-clock above C (its C* is then an upper bound): rerun with ``--sim-cost-us`` near C* to
    check. The two lines cross at C* = C + 1e6 (t_L - t_PPO) / (n_PPO - n_L). Returns:

    * C*, rounded to 0.1 µs, where the learner takes fewer env steps and C* > 0 (C* < C is a line extended
      below the measured cost, as valid as one extended above it);
    * ``"always"`` where it is faster at every cost >= 0 (C* <= 0, or the same env steps in less time);
    * ``"never"`` where no cost is high enough: it takes at least PPO's env steps (and is not always faster);
    * None where either did not reach the threshold.
    """
    if not (learner["reached"] and ppo["reached"]):
        return None
    n_l, t_l = learner["env_steps_to_threshold"], learner["train_s_to_threshold"]
    n_ppo, t_ppo = ppo["env_steps_to_threshold"], ppo["train_s_to_threshold"]
    if n_l == n_ppo:
        return "always" if t_l < t_ppo else "never"
    if n_l > n_ppo:
        return "never"
    crossing = cost_us + (t_l - t_ppo) * 1e6 / (n_ppo - n_l)
    return "always" if crossing <= 0 else round(crossing, 1)


def parse_cost_us(text: str) -> float:
    """``--sim-cost-us``'s value; one ``error:`` line and exit 2 where it is not a finite number >= 0."""
    try:
        return check_cost_us(float(text))
    except ValueError:
        print(f"error: --sim-cost-us {text!r} is not allowed; expected {EXPECTED_COST}", file=sys.stderr)
        raise SystemExit(2) from None


def check_keep_runs(args: argparse.Namespace) -> None:
    """``--keep-runs`` must not hold a run this invocation would write over; one ``error:`` line and exit 2."""
    if args.keep_runs is None:
        return
    envs_ = list(TASKS) if args.env == "both" else [args.env]
    dirs = [args.keep_runs / e / n for e in envs_ for n in args.learners if n != "ppo"]
    taken = [d for d in dirs if d.exists()]
    if taken:
        print(f"error: --keep-runs {args.keep_runs} already holds {taken[0]}; expected a folder without this "
              "invocation's run dirs (move them, or name another folder)", file=sys.stderr)
        raise SystemExit(2)


MBPO_VS_SAC_TARGETS = {"env_steps": 0.5, "train_s": 2.0}
"""Issue 52: MBPO scale within half of SAC scale's env steps to the threshold and twice its training seconds."""


def mbpo_vs_sac(mbpo: dict[str, Any], sac: dict[str, Any]) -> dict[str, Any]:
    """MBPO scale's env steps and training seconds to the threshold over SAC scale's (None where one did not
    reach), against :data:`MBPO_VS_SAC_TARGETS`.
    """
    both = mbpo["reached"] and sac["reached"]
    ratios = {k: (round(mbpo[f"{k}_to_threshold"] / max(sac[f"{k}_to_threshold"], 1e-9), 3) if both else None)
              for k in MBPO_VS_SAC_TARGETS}
    met = {k: ratios[k] is not None and ratios[k] <= bound for k, bound in MBPO_VS_SAC_TARGETS.items()}
    return {**ratios, "targets": MBPO_VS_SAC_TARGETS, "targets_met": met}


def fastest(results: dict[str, Any]) -> str | None:
    """The learner that reached the threshold in the fewest training seconds at this run's sim cost (None: none)."""
    reached = {name: r["train_s_to_threshold"] for name, r in results.items() if r["reached"]}
    return min(reached, key=lambda name: reached[name]) if reached else None


TARGETS = {"mbpo_scale": {"env_steps_vs_ppo": 0.01, "train_s_vs_ppo": 5.0},
           "sac_scale": {"env_steps_vs_ppo": 0.1, "train_s_vs_ppo": 3.0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=[*TASKS, "both"], default="pendulum")
    parser.add_argument("--learners", nargs="+", default=["ppo", "sac_scale", "mbpo_scale", "sac_single",
                                                          "mbpo_single"])
    parser.add_argument("--minutes", type=float, default=6.0, help="wall-clock limit per learner")
    parser.add_argument("--stay", type=int, default=3, help="evaluations in a row at the threshold to count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", type=int, default=None, help="envs for PPO and the scale configs")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for PPO (ours: their configs')")
    parser.add_argument("--sim-cost-us", default="0", help="microseconds added per env transition to every "
                                                               "learner's training env (a slower simulator)")
    parser.add_argument("--out", type=Path, default=Path.cwd(), help="where the charts go")
    parser.add_argument("--keep-runs", type=Path, default=None,
                        help="keep our learners' run dirs in DIR/<env>/<learner> (default: a temporary folder)")
    args = parser.parse_args()
    args.sim_cost_us = parse_cost_us(args.sim_cost_us)
    check_keep_runs(args)
    started = time.perf_counter()
    report: dict[str, Any] = {"benchmark": "vs_ppo", "device": args.device, "seed": args.seed,
                              "sim_cost_us": args.sim_cost_us,
                              "minutes_per_learner": args.minutes, "stay": args.stay, "eval_episodes": EVAL_EPISODES,
                              "cpu_count": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                              "torch": torch.__version__}
    for env_name in TASKS if args.env == "both" else [args.env]:
        task = TASKS[env_name]
        curves: dict[str, Curve] = {}
        with contextlib.ExitStack() as stack:
            root = (args.keep_runs / env_name if args.keep_runs is not None
                    else Path(stack.enter_context(tempfile.TemporaryDirectory())))
            root.mkdir(parents=True, exist_ok=True)
            for name in args.learners:
                with contextlib.redirect_stdout(sys.stderr):  # rsl_rl prints its models: keep stdout one line
                    curves[name] = run_ppo(task, args) if name == "ppo" else run_ours(task, name, args, root)
                print(f"[vs_ppo] {env_name} {name}: {curves[name].summary(task.threshold, args.stay)}",
                      file=sys.stderr)
        results = {name: c.summary(task.threshold, args.stay) for name, c in curves.items()}
        args.out.mkdir(parents=True, exist_ok=True)
        chart_path = args.out / f"vs_ppo_{env_name}.png"
        chart(task, curves, args.stay, chart_path)
        entry: dict[str, Any] = {"env_id": task.env_id, "num_envs": args.num_envs or task.num_envs,
                                 "threshold": task.threshold, "results": results, "chart": str(chart_path)}
        if "ppo" in results:
            entry["vs_ppo"] = ratios(results)
            entry["crossover_us"] = {name: crossover_us(r, results["ppo"], args.sim_cost_us)
                                     for name, r in results.items() if name != "ppo"}
            entry["targets"] = TARGETS
            entry["targets_met"] = {
                name: {k: (entry["vs_ppo"][name][k] is not None and entry["vs_ppo"][name][k] <= bound)
                       for k, bound in t.items()}
                for name, t in TARGETS.items() if name in entry["vs_ppo"]}
        if {"mbpo_scale", "sac_scale"} <= results.keys():
            entry["mbpo_vs_sac_scale"] = mbpo_vs_sac(results["mbpo_scale"], results["sac_scale"])
        entry["fastest_to_threshold"] = fastest(results)
        report[env_name] = entry
    report["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
