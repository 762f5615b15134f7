"""sbx-rl's CrossQ (Stable-Baselines-Jax, the CrossQ authors' JAX code) under our locomotion protocol.

An end-to-end reference no unit test can give (issue 50): the authors' CrossQ on MuJoCo, seeded and evaluated as
``benchmarks/locomotion.py`` evaluates ours, so that its curve can be drawn beside our CrossQ's. The protocol:
30,000 env steps, the first 5,000 uniformly random (``learning_starts``), an evaluation every 2,500 env steps of
10 deterministic episodes on a separate env seeded from the seed, critics 2048x2048 (the CrossQ paper's; sbx's
own default is 1024x1024, a cut it makes for speed), everything else sbx's CrossQ defaults as sbx-rl 0.28.0 sets
them (read from the model into config.yaml): lr 1e-3 for actor and critics (Adam, beta1 0.5), batch 256, one
update per env step, ``policy_delay`` 3, target entropy -act_dim, alpha learned from 1.0 by Adam (lr 1e-3,
beta1 0.9), BatchRenorm in actor and critics (momentum 0.99, 100,000 warm-up steps, r_max 3, d_max 5), no target
networks, actor 256x256. The replay buffer holds ``--env-steps`` transitions instead of sbx's 1,000,000: both
hold every transition of the run and draw the same indices (``np.random.randint(0, pos)``), and the smaller one
pickles to about 6 MB a checkpoint instead of about 200 MB (SB3 stores Hopper's observations as float64, twice).

The run writes what our runs write, so ``benchmarks/locomotion.py --report-only`` machinery can read it:
``metrics.csv`` (one row per evaluation; our columns that this run can fill, in our order), ``config.yaml`` and
``run.json`` (``done``, versions, CPU flags, seed, wall-clock, each invocation and the load it shared the machine
with). It takes hours on a 2-core CPU, so it resumes: after each evaluation the model (``model.save``: parameters,
optimiser and BatchRenorm state, counters), the replay buffer and the evaluations so far go to
``checkpoints/<env_steps>/`` (written under a temporary name, then ``os.replace``d whole); a rerun of the same
command loads the newest and continues with ``learn(..., reset_num_timesteps=False)``, so the total stays
``--env-steps`` and the evaluations keep their schedule. A resumed run is sensible, not bit-identical: the episode
in flight is cut (the env is reset, as SB3's ``load`` forces), and the random streams that SB3 does not save
(numpy's and Python's, the action space's, the env's, sbx's JAX update key) are seeded afresh from ``(seed,
env_steps)`` instead of going on; the policy's own sampling key is saved with the policy and goes on.

Run with the separate venv (sbx pulls jax, flax and stable-baselines3; it imports neither mbpo nor torch itself):

    ~/sbx-venv/bin/python benchmarks/sbx_crossq.py --env hopper --seed 0 --run-dir ~/mbpo-runs/sbx/crossq_sbx-s0
                          [--env-steps 30000] [--eval-every 2500] [--learning-starts 5000] [--eval-episodes 10]

Prints one JSON line: the run's summary (also when run.json already says done, without training).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shutil
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml
from sbx import CrossQ  # type: ignore[import-not-found]
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

ENVS = {"hopper": "Hopper-v5", "walker2d": "Walker2d-v5"}
STEPS = 30_000
RANDOM_STEPS = 5_000
EVAL_EVERY, EVAL_EPISODES = 2_500, 10
LAST_EVALS = 3
"""A seed's score, as benchmarks/locomotion.py takes it: the mean of the last three evaluations."""
LEARNER = "crossq_sbx"
LABEL = "CrossQ (sbx-rl, the authors' JAX code, utd 1)"
NET_ARCH = {"pi": [256, 256], "qf": [2048, 2048]}
"""The actor is sbx's default; the critics are the CrossQ paper's 2048 wide (sbx's default is [1024, 1024])."""
COLUMNS = ["env_steps", "updates", "wall_s", "train_return", "eval_return", "cpu_s", "env_steps_per_s",
           "updates_per_s", "env_steps_per_s_whole_run", "updates_per_s_whole_run", "time_eval_s", "loss_critic",
           "loss_actor", "loss_alpha", "alpha", "eval_return_std", "eval_return_min", "eval_return_max",
           "eval_length_mean"]
"""The columns of our metrics.csv that this run can fill, in our order (cpu_s where SB3 runs put it); a cell with
nothing measured yet (losses before learning starts, train_return before an episode ends) is empty."""
PACKAGES = ("sbx-rl", "jax", "jaxlib", "flax", "optax", "stable_baselines3", "gymnasium", "mujoco", "numpy",
            "tfp-nightly")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")
PROTOCOL_KEYS = ("env", "seed", "env_steps", "eval_every", "eval_episodes", "learning_starts")
"""What a rerun must share with the run it resumes (config.yaml's ``protocol``)."""
RESUME_STREAM, EVAL_STREAM = 0, 1
ALIASES = ("actor", "qf")
"""The model's references to its policy's networks, left out of a checkpoint and pointed back at the loaded
policy: pickled apart, the actor (whose ``reset_noise`` is bound to the policy) carries a second copy of the
whole policy, doubling each checkpoint (274 MB against 131 MB with 2048-wide critics), a copy that goes stale."""


class ProtocolMismatch(Exception):
    """A rerun whose arguments differ from the run dir's config.yaml: resuming would mix two protocols."""


def derive(seed: int, stream: int, env_steps: int) -> int:
    """A seed for one purpose at one env step, independent of the others (numpy's SeedSequence); below 2**31,
    which every consumer (numpy, Python, gymnasium, ``jax.random.PRNGKey``) takes.
    """
    return int(np.random.SeedSequence([seed, stream, env_steps]).generate_state(1)[0]) % 2**31


def machine() -> dict[str, Any]:
    """CPU model, the flags that decide speed and precision, the cores this process may use."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        info = []
    model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                 platform.processor() or platform.machine())
    flags = set(next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), []))
    return {"cpu": model, "cpu_flags": sorted(flags & set(CPU_FLAGS)), "cpu_count": len(os.sched_getaffinity(0)),
            "platform": sys.platform}


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` whole or not at all: a kill mid-write leaves the previous file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint (a dir named by its env step; a ``*.tmp`` dir was cut off and is removed)."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return None
    for stale in root.glob("*.tmp"):
        shutil.rmtree(stale)
    done = [d for d in root.iterdir() if d.is_dir() and d.name.isdigit() and (d / "state.json").is_file()]
    return max(done, key=lambda d: int(d.name), default=None)


def write_metrics(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if row.get(k) is None else row[k] for k in COLUMNS} for row in rows)
    atomic_write(run_dir / "metrics.csv", out.getvalue())


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The evaluations metrics.csv holds (env_steps, eval_return and the rest as written), for a done run's summary."""
    try:
        with open(run_dir / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []
    return [{k: (int(v) if k in ("env_steps", "updates") else float(v)) if v else None for k, v in r.items()}
            for r in rows if r.get("eval_return")]


def score(rows: list[dict[str, Any]]) -> float | None:
    evals = [r["eval_return"] for r in rows]
    return round(statistics.fmean(evals[-LAST_EVALS:]), 1) if len(evals) >= LAST_EVALS else None


def summary(run_dir: Path, info: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    last = rows[-1] if rows else {}
    return {"benchmark": "sbx_crossq", "learner": LEARNER, "env": info.get("env"), "seed": info.get("seed"),
            "run_dir": str(run_dir), "done": bool(info.get("done")), "env_steps": last.get("env_steps"),
            "updates": last.get("updates"), "wall_s": last.get("wall_s"),
            "updates_per_s_whole_run": last.get("updates_per_s_whole_run"),
            "returns": {str(r["env_steps"]): round(r["eval_return"], 1) for r in rows}, "score": score(rows),
            "versions": info.get("versions"), "cpu_flags": info.get("machine", {}).get("cpu_flags")}


def sbx_config(model: Any) -> dict[str, Any]:
    """The settings the model holds (after sbx resolved its defaults), for config.yaml."""
    policy = model.policy
    return {
        "algorithm": "sbx.CrossQ", "policy": "MlpPolicy", "learning_rate": float(model.learning_rate),
        "qf_learning_rate": float(model.qf_learning_rate), "batch_size": int(model.batch_size),
        "buffer_size": int(model.buffer_size), "learning_starts": int(model.learning_starts),
        "gamma": float(model.gamma), "train_freq": [int(model.train_freq.frequency), str(model.train_freq.unit.value)],
        "gradient_steps": int(model.gradient_steps), "policy_delay": int(model.policy_delay),
        "n_steps": int(model.n_steps), "ent_coef": str(model.ent_coef_init), "ent_coef_init": 1.0,
        "target_entropy": float(model.target_entropy),
        "alpha_optimizer": "optax.adam(learning_rate) (b1 0.9, b2 0.999: optax's defaults)",
        "optimizer": getattr(policy.optimizer_class, "__name__", str(policy.optimizer_class)),
        "optimizer_kwargs": {k: float(v) for k, v in policy.optimizer_kwargs.items()},
        "net_arch": {"pi": list(policy.net_arch_pi), "qf": list(policy.net_arch_qf)},
        "n_critics": int(policy.n_critics), "activation_fn": getattr(policy.activation_fn, "__name__", "relu"),
        "batch_norm_critic": bool(policy.batch_norm), "batch_norm_actor": bool(policy.batch_norm_actor),
        "batch_norm_momentum": float(policy.batch_norm_momentum),
        "renorm_warmup_steps": int(policy.renorm_warmup_steps), "renorm_r_max": 3, "renorm_d_max": 5,
        "renorm_epsilon": 0.001, "dropout_rate": float(policy.dropout_rate), "layer_norm": bool(policy.layer_norm),
        "target_networks": False, "device": "cpu",
    }


def protocol_of(args: argparse.Namespace) -> dict[str, Any]:
    return {"env": ENVS[args.env], **{k: getattr(args, k) for k in PROTOCOL_KEYS if k != "env"}}


def check_protocol(args: argparse.Namespace, run_dir: Path) -> None:
    """Refuse a run dir started under other arguments: resuming it (or calling it done) would mix protocols."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return
    was = (yaml.safe_load(path.read_text()) or {}).get("protocol", {})
    diff = {k: (was.get(k), v) for k, v in protocol_of(args).items() if was.get(k) != v}
    if diff:
        what = ", ".join(f"{k}={old!r} there but {new!r} here" for k, (old, new) in diff.items())
        raise ProtocolMismatch(f"{run_dir} holds a run with other settings ({what}); rerun with its settings "
                               "to resume it, or give a new --run-dir")


class Run:
    """One run dir: its evaluations, checkpoints, metrics.csv and run.json, kept consistent with each other."""

    def __init__(self, args: argparse.Namespace, run_dir: Path) -> None:
        self.args, self.run_dir = args, run_dir
        self.env_id = ENVS[args.env]
        self.eval_env = DummyVecEnv([lambda: Monitor(gym.make(self.env_id))])
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        self.rows: list[dict[str, Any]] = []
        self.episodes: list[float] = []
        """Training episodes' returns since the last row (train_return)."""
        self.wall_at_start = self.cpu_at_start = 0.0
        self.last = (0, 0, 0.0)
        """(env_steps, updates, wall_s) at the last row, or at the checkpoint this invocation resumed."""
        self.info = read_json(run_dir / "run.json")
        self.actor_losses: tuple[float | None, float | None] = (None, None)
        """(actor loss, alpha loss) of the newest actor update: sbx logs 0.0 for both after a critic-only update."""

    def wall_s(self) -> float:
        return round(self.wall_at_start + time.perf_counter() - self.start, 3)

    def start_model(self) -> Any:
        """A new model, or the newest checkpoint's with its replay buffer and evaluations."""
        train_env = gym.make(self.env_id)
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is None:
            model = CrossQ("MlpPolicy", train_env, learning_starts=self.args.learning_starts,
                           buffer_size=self.args.env_steps, policy_kwargs={"net_arch": NET_ARCH},
                           seed=self.args.seed, device="cpu", verbose=0)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            config = {"protocol": protocol_of(self.args), "learner": LEARNER, "label": LABEL, "sbx": sbx_config(model)}
            atomic_write(self.run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
            self.info = {"done": False, "invocations": self.info.get("invocations", [])}
        else:
            # SB3's load forces an env reset and re-seeds every stream from the model's seed; seed them afresh
            # from (seed, env_steps) instead, so a resumed run does not replay the start's random draws.
            model = CrossQ.load(checkpoint / "model.zip", env=train_env, device="cpu")
            for name in ALIASES:
                setattr(model, name, getattr(model.policy, name))
            model.load_replay_buffer(checkpoint / "replay_buffer.pkl")
            model.set_random_seed(derive(self.args.seed, RESUME_STREAM, model.num_timesteps))
            state = read_json(checkpoint / "state.json")
            self.rows, self.episodes = state["rows"], state["episodes"]
            self.wall_at_start, self.cpu_at_start = state["wall_s"], state["cpu_s"]
            self.last = (model.num_timesteps, model._n_updates, state["wall_s"])
            print(f"[sbx_crossq] resuming {self.run_dir} from its checkpoint at env step {model.num_timesteps}",
                  file=sys.stderr)
        self.info |= {"label": LABEL, "learner": LEARNER, "env": self.env_id, "seed": self.args.seed,
                      "versions": versions(), "machine": machine()}
        self.info.setdefault("invocations", []).append(
            {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "at_env_steps": int(model.num_timesteps),
             "load_avg_1m": [round(os.getloadavg()[0], 2)]})
        write_metrics(self.run_dir, self.rows)
        self.write_run_json()
        return model

    def write_run_json(self) -> None:
        rows = self.rows
        self.info |= {"wall_s": rows[-1]["wall_s"] if rows else 0.0, "env_steps": rows[-1]["env_steps"] if rows else 0}
        atomic_write(self.run_dir / "run.json", json.dumps(self.info, indent=1) + "\n")

    def note_update(self, model: Any) -> None:
        """Keep the losses of an actor update: sbx steps the actor and alpha on update n when
        ``n % policy_delay == 0`` (the last of each block of three, after the critics), and otherwise logs 0.0.
        """
        updates = int(model._n_updates)
        if updates > 0 and updates % model.policy_delay == 0:
            logged = model.logger.name_to_value
            self.actor_losses = (logged.get("train/actor_loss"), logged.get("train/ent_coef_loss"))

    def maybe_evaluate(self, model: Any) -> None:
        """Evaluate, record and checkpoint at each multiple of --eval-every and at the end, once each."""
        steps = int(model.num_timesteps)
        if steps <= self.last[0] or (steps % self.args.eval_every and steps < self.args.env_steps):
            return
        t0 = time.perf_counter()
        self.eval_env.seed(derive(self.args.seed, EVAL_STREAM, steps))  # each evaluation reproducible alone
        returns, lengths = evaluate_policy(model, self.eval_env, n_eval_episodes=self.args.eval_episodes,
                                           deterministic=True, return_episode_rewards=True, warn=False)
        eval_s = time.perf_counter() - t0
        wall, updates = self.wall_s(), int(model._n_updates)
        logged = model.logger.name_to_value
        trained = updates > 0
        row = {
            "env_steps": steps, "updates": updates, "wall_s": wall,
            "train_return": statistics.fmean(self.episodes) if self.episodes else None,
            "eval_return": float(np.mean(returns)),
            "cpu_s": round(self.cpu_at_start + time.process_time() - self.cpu_start, 3),
            "env_steps_per_s": round((steps - self.last[0]) / max(wall - self.last[2], 1e-9), 3),
            "updates_per_s": round((updates - self.last[1]) / max(wall - self.last[2], 1e-9), 3),
            "env_steps_per_s_whole_run": round(steps / max(wall, 1e-9), 3),
            "updates_per_s_whole_run": round(updates / max(wall, 1e-9), 3), "time_eval_s": round(eval_s, 3),
            "loss_critic": logged.get("train/critic_loss") if trained else None,
            "loss_actor": self.actor_losses[0], "loss_alpha": self.actor_losses[1],
            "alpha": logged.get("train/ent_coef") if trained else None,
            "eval_return_std": float(np.std(returns)), "eval_return_min": float(np.min(returns)),
            "eval_return_max": float(np.max(returns)), "eval_length_mean": float(np.mean(lengths)),
        }
        self.rows.append(row)
        self.episodes = []
        self.last = (steps, updates, wall)
        self.checkpoint(model)
        write_metrics(self.run_dir, self.rows)
        this = self.info["invocations"][-1]
        this["load_avg_1m"].append(round(os.getloadavg()[0], 2))  # the machine's load beside this run
        this |= {"reached_env_steps": steps, "wall_s": round(time.perf_counter() - self.start, 1)}
        self.write_run_json()
        print(f"[sbx_crossq] env step {steps}: eval return {row['eval_return']:.1f}, {row['updates_per_s']} "
              f"updates/s, wall {wall:.0f} s", file=sys.stderr)

    def checkpoint(self, model: Any) -> None:
        """Model, replay buffer and evaluations as one dir, renamed into place whole; older ones removed."""
        root = self.run_dir / "checkpoints"
        steps = int(model.num_timesteps)
        tmp, final = root / f"{steps}.tmp", root / str(steps)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        model.save(tmp / "model.zip", exclude=list(ALIASES))
        model.save_replay_buffer(tmp / "replay_buffer.pkl")
        state = {"env_steps": steps, "rows": self.rows, "episodes": self.episodes, "wall_s": self.last[2],
                 "cpu_s": self.rows[-1]["cpu_s"]}
        (tmp / "state.json").write_text(json.dumps(state) + "\n")
        if final.exists():  # a rerun reaching the same step again (its checkpoint was not the newest)
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in root.iterdir():
            if old != final and old.name.isdigit():
                shutil.rmtree(old)


class Evaluate(BaseCallback):
    """Evaluates and checkpoints between whole env steps: at the start of each collection (after the previous
    step's transition is stored and its update done) and at the end of training.
    """

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run

    def _on_step(self) -> bool:
        self.run.episodes += [float(i["episode"]["r"]) for i in self.locals["infos"] if "episode" in i]
        return True

    def _on_rollout_start(self) -> None:
        self.run.note_update(self.model)
        self.run.maybe_evaluate(self.model)

    def _on_training_end(self) -> None:
        self.run.note_update(self.model)
        self.run.maybe_evaluate(self.model)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=sorted(ENVS), default="hopper")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", type=Path, required=True, help="where the run lives; rerun to resume")
    parser.add_argument("--env-steps", type=int, default=STEPS)
    parser.add_argument("--eval-every", type=int, default=EVAL_EVERY, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--learning-starts", type=int, default=RANDOM_STEPS, help="uniformly random env steps")
    args = parser.parse_args(argv)
    for name in ("env_steps", "eval_every", "eval_episodes", "learning_starts"):
        if getattr(args, name) < (0 if name == "learning_starts" else 1):
            parser.error(f"--{name.replace('_', '-')} is {getattr(args, name)}; expected "
                         f"{'an integer >= 0' if name == 'learning_starts' else 'a positive integer'}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir = args.run_dir.expanduser().resolve()
    try:
        check_protocol(args, run_dir)
    except ProtocolMismatch as exc:
        print(f"sbx_crossq: {exc}", file=sys.stderr)
        return 2
    info = read_json(run_dir / "run.json")
    if info.get("done"):
        print(json.dumps(summary(run_dir, info, read_rows(run_dir))))
        return 0
    run = Run(args, run_dir)
    model = run.start_model()
    try:
        remaining = args.env_steps - int(model.num_timesteps)
        if remaining > 0:
            model.learn(total_timesteps=remaining, callback=Evaluate(run), reset_num_timesteps=False)
        run.maybe_evaluate(model)  # a run killed after its last step's checkpoint, before done was written
    except KeyboardInterrupt:
        print(f"sbx_crossq: interrupted at env step {model.num_timesteps}; rerun the same command to resume "
              f"from the checkpoint at {run.last[0]}", file=sys.stderr)
        return 130
    run.info |= {"done": True, "score": score(run.rows)}
    run.write_run_json()
    print(json.dumps(summary(run_dir, run.info, run.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
