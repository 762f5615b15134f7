"""Run configuration: a typed dataclass schema, YAML files and dotted ``key=value`` overrides.

OmegaConf structured configs do the parsing: an unknown key or a value of the
wrong type is rejected before anything runs. Ranges and choices are checked
here on top. Every float value (list elements and non-null Optional floats
included) must be finite, and a run whose budget can never be met (updates,
env steps, model rollouts or a model buffer beyond what any machine can do) is
refused with the arithmetic that shows it. Every field's docstring (the string
literal under it) is its help text: ``python -m mbpo --help-config``
prints them.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import math
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mbpo.errors import MbpoError

__all__ = ["Config", "ConfigError", "load_config", "config_from_yaml", "to_yaml", "describe", "updates_per_transition",
           "rollouts_per_transition"]


class ConfigError(MbpoError, ValueError):
    """A config file or override names an unknown key, a wrong type or an out-of-range value."""


@dataclass
class EnvConfig:
    id: str = "Pendulum-v1"
    """Env id: a native torch env (envs.list_envs()) or any gymnasium id."""
    num_envs: int = 1
    """Envs stepped together by the training env (the vector batch size)."""
    source: str = "auto"
    """Which implementation of env.id: auto (the native torch env if there is one, else mjlab or gymnasium),
    native, or gymnasium (gymnasium's own, on CPU: e.g. CartPole-v1 as a CPU-bound simulator)."""
    device: str | None = None
    """Where the env's tensors live (cpu, cuda or cuda:N); null = the run's device. With device=auto
    the whole run follows it (e.g. an mjlab env on cpu plans everything on cpu); a different explicit
    device is a DeviceMismatchError at start-up."""


@dataclass
class SACConfig:
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the actor (and of each critic unless critic_hidden_sizes is set)."""
    critic_hidden_sizes: list[int] | None = None
    """Hidden layer widths of each critic; null = hidden_sizes (large-batch recipes widen the critics to
    512-1024 and keep the actor small)."""
    layer_norm: bool = False
    """LayerNorm in every hidden layer of the critics (FastTD3 / FlashSAC's stabiliser for big batches)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the twin critics."""
    alpha_lr: float = 3e-4
    """Adam learning rate of log(alpha), the entropy temperature."""
    init_alpha: float = 1.0
    """Initial entropy temperature alpha."""
    target_entropy: float | None = None
    """Entropy target in nats; null means -act_dim (the SAC paper's heuristic)."""
    gamma: float = 0.99
    """Discount factor per env step."""
    tau: float = 0.005
    """Polyak rate of the target critics per update (1.0 = hard copy)."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip per network; 0 disables clipping."""
    precision: str = "fp32"
    """fp32, or bf16 autocast for the update (only where the hardware supports it)."""


@dataclass
class DQNConfig:
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the Q-network."""
    lr: float = 2.5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor per env step."""
    double: bool = True
    """Double DQN: the online net picks the next action, the target net values it."""
    target_update_interval: int = 500
    """Updates between hard copies of the online net into the target net."""
    epsilon_start: float = 1.0
    """Exploration epsilon at update 0."""
    epsilon_end: float = 0.05
    """Exploration epsilon after the decay."""
    epsilon_decay_updates: int = 10_000
    """Updates over which epsilon decays linearly (on the learner, published with the weights)."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip; 0 disables clipping."""


@dataclass
class AgentConfig:
    name: str = "sac"
    """Learner: sac (continuous actions) or dqn (discrete actions)."""
    batch_size: int = 256
    """Transitions per gradient update."""
    utd_ratio: float | None = None
    """Gradient updates per collected env transition (a vector step of N envs gives N * utd_ratio); null = 1,
    or updates_per_vector_step / num_envs when that is set (set one of the two). At most 1,000, and
    (total_env_steps - learning_starts) * utd_ratio updates must fit in 30 days at 20,000/s."""
    updates_per_vector_step: float | None = None
    """Gradient updates per vector step of num_envs envs, the large-scale recipes' unit (FastTD3, PQL): an
    alternative to utd_ratio (= updates_per_vector_step / num_envs); null = use utd_ratio."""
    n_step: int = 1
    """n-step returns: each stored transition sums n discounted rewards and bootstraps with gamma**n (fewer
    steps where an episode ends first); 1 = ordinary 1-step transitions. Not with model.enabled (the dynamics
    model learns from 1-step transitions)."""
    obs_norm: bool = False
    """Normalise observations by their running mean and variance (SAC): learned on the learner from every real
    transition it stores, published with the policy's weights, so collectors, model rollouts and evaluation
    apply the same statistics, and saved in checkpoints. The large-scale recipes (FastTD3, FastSAC) use it."""
    compile: bool = False
    """torch.compile the SAC update's losses, forward and backward (CUDA graphs on a GPU): same numbers as eager,
    faster once compiled; the first update waits for the compiler (tens of seconds on a CPU)."""
    learning_starts: int = 1000
    """Env transitions collected with random actions before the first update."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity in transitions."""
    sac: SACConfig = field(default_factory=SACConfig)
    """SAC hyperparameters (used when name=sac)."""
    dqn: DQNConfig = field(default_factory=DQNConfig)
    """DQN hyperparameters (used when name=dqn)."""


@dataclass
class ModelConfig:
    enabled: bool = False
    """MBPO on: learn a dynamics ensemble and train the agent mostly on branched model rollouts."""
    ensemble_size: int = 7
    """Members of the probabilistic dynamics ensemble."""
    num_elites: int = 5
    """Members with the lowest holdout loss that generate rollouts."""
    hidden_sizes: list[int] = field(default_factory=lambda: [200, 200, 200, 200])
    """Hidden layer widths of each member."""
    activation: str = "swish"
    """Hidden activation: swish (SiLU, the paper's) or relu."""
    lr: float = 1e-3
    """Adam learning rate of the ensemble."""
    weight_decay: list[float] = field(default_factory=lambda: [2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4])
    """L2 penalty per layer, input layer first (one per hidden layer plus the output layer)."""
    logvar_bound_penalty: float = 0.01
    """Weight of the penalty on the learned log-variance bounds (max_logvar - min_logvar)."""
    batch_size: int = 256
    """Transitions per ensemble gradient step."""
    holdout_ratio: float = 0.2
    """Fraction of the real data held out to measure the models (capped by max_holdout)."""
    max_holdout: int = 5000
    """Largest holdout set, in transitions."""
    patience: int = 5
    """Early stopping: epochs without a 1% holdout improvement of any member before training stops."""
    max_epochs: int = 0
    """Cap on training epochs per model training; 0 = until early stopping."""
    max_grad_steps: int = 0
    """Cap on ensemble gradient steps per model training (the last epoch stops part-way); 0 = no cap.
    Without it a training costs epochs x real transitions / batch_size, so it grows with the run."""
    train_freq: int = 250
    """model_train_freq: real transitions between model trainings (summed over num_envs)."""
    rollouts_per_real: float | None = None
    """Branched rollouts started per real transition (paper: 100,000 starts every 250 steps); null = 400, or
    rollouts_per_vector_step / num_envs when that is set (set one of the two)."""
    rollouts_per_vector_step: float | None = None
    """Branched rollouts per vector step of num_envs envs: at 4,096 envs, 400 per real transition would start
    1.6M branches a step; null = use rollouts_per_real."""
    rollout_schedule: list[int] = field(default_factory=lambda: [20, 100, 1, 1])
    """[start_epoch, end_epoch, start_len, end_len]: rollout length grows linearly between the epochs."""
    epoch_length: int = 1000
    """Real transitions per MBPO epoch (the unit of rollout_schedule and retain_epochs)."""
    retain_epochs: int = 1
    """The model buffer holds the rollouts of this many epochs."""
    real_ratio: float = 0.05
    """Fraction of real transitions in each policy batch; the rest comes from the model buffer."""
    learned_termination: bool = False
    """Learn a termination head even where a known termination function exists."""


@dataclass
class CheckpointConfig:
    every: int = 10_000
    """Env transitions between checkpoints (a final one is always written)."""
    keep: int = 3
    """How many of the newest checkpoints to keep on disk."""


@dataclass
class RayConfig:
    address: str | None = None
    """null: start a private local Ray (loopback only, no dashboard, no usage stats) and shut it down at the
    end; auto or ray://host:port: join that cluster (it is left running)."""
    num_cpus: float | None = None
    """CPUs of the private local Ray; null = num_collectors x num_cpus_per_collector + 1 (the driver)."""
    num_cpus_per_collector: float = 1.0
    """CPUs each collector actor reserves (fractions let several share a CPU)."""
    num_gpus_per_collector: float = 0.0
    """GPUs each collector actor reserves; a collector with a GPU builds its env on its own cuda:0."""
    env_device: str | None = None
    """The device of each collector's env, as that actor sees it; null = cuda:0 with a GPU, else cpu."""


@dataclass
class RuntimeConfig:
    backend: str = "thread"
    """Where collectors run: thread (in the trainer's process; GPU envs, fast torch envs), process (a spawned
    process each: CPU-bound or flaky simulators, more cores, several GPUs) or ray (Ray actors, on any node of
    a cluster; the ray extra). See README "Backends"."""
    num_collectors: int = 1
    """Collectors, each with its own vectorized env (env.num_envs envs) and CPU policy replica."""
    collection_batch_size: int = 64
    """Transitions per batch a collector pushes (rounded up to whole vector steps of env.num_envs)."""
    max_queue_size: int = 8
    """Batches the collector -> learner queue holds; memory stays bounded whatever the learner's speed."""
    queue_full: str = "block"
    """What a collector does when the queue is full: block (wait for the learner) or drop_oldest (count it)."""
    publish_every: int = 20
    """Policy updates between versioned CPU weight snapshots published to the collectors."""
    ratio_tolerance: float = 0.1
    """Realised utd_ratio, model trainings and rollouts per real transition stay within this fraction of
    their targets: collectors wait when they run further ahead."""
    collector_timeout_s: float = 60.0
    """A collector with no sign of progress for this long (no env step returned, no batch pushed, not
    waiting on the queue or the ratio gate) is hung: a process is terminated and replaced (counted as a
    restart); a thread, which cannot be killed, is reported and the run goes on with the rest."""
    max_restarts: int = 3
    """Collector failures restarted (from the latest snapshot) before the run stops with an error."""
    shutdown_timeout_s: float = 10.0
    """Deadline for joining the worker threads on stop, Ctrl-C or SIGTERM."""
    nonfinite: str = "raise"
    """A non-finite observation or reward from an env: raise (naming env index and field) or drop (count it)."""
    learner_threads: int = 1
    """torch intra-op threads of the learner thread (policy updates)."""
    model_threads: int = 1
    """torch intra-op threads of the model thread (ensemble training and rollouts)."""
    collector_threads: int = 1
    """torch intra-op threads of each collector thread (CPU acting)."""
    ray: RayConfig = field(default_factory=RayConfig)
    """Where Ray runs and what each collector actor reserves (runtime.backend=ray)."""


@dataclass
class Config:
    seed: int = 0
    """Seed of every RNG (python, numpy, torch, envs, replay sampling)."""
    device: str = "auto"
    """Device of env, learner and buffers: auto (cuda if available), cpu, cuda or cuda:N."""
    total_env_steps: int = 20_000
    """Env transitions to collect in total (summed over num_envs)."""
    eval_every: int = 1_000
    """Env transitions between evaluations of the deterministic policy."""
    eval_episodes: int = 10
    """Episodes per evaluation, run on a separate env instance."""
    log_every: int = 1_000
    """Env transitions between rows of metrics.csv (every evaluation adds a row too)."""
    run_dir: str | None = None
    """Where the run writes config.yaml, metrics.csv and checkpoints; null = a new
    runs/<env>-<agent>-s<seed>-<YYYYmmdd-HHMMSS>-<pid> under the current directory."""
    progress: bool = True
    """Show a tqdm progress bar."""
    torch_threads: int = 1
    """torch intra-op threads of the learner; RL-sized nets run fastest on 1-2, more only contend."""
    trainer: str = "async"
    """async (collector threads, model thread and learner overlap) or sync (the reference loop)."""
    debug: bool = False
    """Debug mode (--debug): anomaly detection, one collector, a small queue, checks at every hand-off."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The training env (evaluation builds a separate one of the same id)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """The learner."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The dynamics ensemble and branched rollouts (MBPO); model.enabled=false gives the plain learner."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpointing."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """The async runtime: collectors, queue, weight publishing, ratio gating, supervision."""


_CHOICES: dict[str, tuple[str, ...]] = {
    "model.activation": ("swish", "relu"),
    "agent.name": ("sac", "dqn"),
    "env.source": ("auto", "native", "gymnasium"),
    "agent.sac.precision": ("fp32", "bf16"),
    "trainer": ("async", "sync"),
    "runtime.queue_full": ("block", "drop_oldest"),
    "runtime.backend": ("thread", "process", "ray"),
    "runtime.nonfinite": ("raise", "drop"),
}
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
# Float keys that may hold nan or inf; each must say so (and what it means) in its docstring. None today.
_NONFINITE_OK: frozenset[str] = frozenset()

# Budgets. A config is refused when even these optimistic numbers cannot finish it in MAX_RUN_DAYS:
# they are upper bounds of what any machine does today, so no run that could finish is refused.
MAX_RUN_DAYS = 30
"""Longest run a config may ask for; past a month a config is a typo, not a plan."""
OPTIMISTIC_UPDATES_PER_S = 20_000
"""Gradient updates per second of a small-net, fused (CUDA-graph) SAC/DQN update on a big GPU: an upper
bound; typical runs do 100-3,000."""
MAX_UTD_RATIO = 1_000
"""Largest agent.utd_ratio: published recipes use 1-20 (SAC 1, MBPO 20-40, REDQ/DroQ 20), so 1,000
updates per transition is already 25x the largest and anything above is a typo (e.g. a total count)."""
OPTIMISTIC_ENV_STEPS_PER_S = 100_000_000
"""Env transitions per second: GPU simulators reach 1e6-1e7 on simple tasks, so 1e8 is an upper bound."""
OPTIMISTIC_MODEL_STEPS_PER_S = 100_000_000
"""Branched-rollout steps per second: an ensemble forward of the default 4x200 MLPs costs about 2 MFLOP per
transition over 7 members (HalfCheetah), so 1e8 steps/s would be ~200 TFLOP/s, 3x an H100's fp32 peak."""
MAX_MODEL_BUFFER_TRANSITIONS = 2_000_000_000
"""Largest model buffer: it is allocated in one piece at the first rollout, and a transition (obs, action,
reward, next obs, terminated in float32) is at least 36 bytes (Pendulum), 168 for HalfCheetah, so 2e9 is
72-336 GB, more than any GPU holds; MBPO's own configs need at most about 1e7."""
# key -> (low, high, low inclusive); None = unbounded on that side.
_RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "total_env_steps": (1, None, True),
    "eval_every": (1, None, True),
    "eval_episodes": (1, None, True),
    "log_every": (1, None, True),
    "torch_threads": (1, None, True),
    "env.num_envs": (1, None, True),
    "agent.batch_size": (1, None, True),
    "agent.utd_ratio": (0, None, False),
    "agent.updates_per_vector_step": (0, None, False),
    "agent.n_step": (1, 100, True),
    "agent.learning_starts": (0, None, True),
    "agent.buffer_size": (1, None, True),
    "agent.sac.actor_lr": (0, None, False),
    "agent.sac.critic_lr": (0, None, False),
    "agent.sac.alpha_lr": (0, None, False),
    "agent.sac.init_alpha": (0, None, False),
    "agent.sac.gamma": (0, 1, True),
    "agent.sac.tau": (0, 1, False),
    "agent.sac.max_grad_norm": (0, None, True),
    "agent.dqn.lr": (0, None, False),
    "agent.dqn.gamma": (0, 1, True),
    "agent.dqn.target_update_interval": (1, None, True),
    "agent.dqn.epsilon_start": (0, 1, True),
    "agent.dqn.epsilon_end": (0, 1, True),
    "agent.dqn.epsilon_decay_updates": (1, None, True),
    "agent.dqn.max_grad_norm": (0, None, True),
    "model.ensemble_size": (1, None, True),
    "model.num_elites": (1, None, True),
    "model.lr": (0, None, False),
    "model.logvar_bound_penalty": (0, None, True),
    "model.batch_size": (1, None, True),
    "model.holdout_ratio": (0, 1, False),
    "model.max_holdout": (1, None, True),
    "model.patience": (1, None, True),
    "model.max_epochs": (0, None, True),
    "model.max_grad_steps": (0, None, True),
    "model.train_freq": (1, None, True),
    "model.rollouts_per_real": (0, None, True),
    "model.rollouts_per_vector_step": (0, None, True),
    "model.epoch_length": (1, None, True),
    "model.retain_epochs": (1, None, True),
    "model.real_ratio": (0, 1, True),
    "checkpoint.every": (1, None, True),
    "checkpoint.keep": (1, None, True),
    "runtime.num_collectors": (1, None, True),
    "runtime.collection_batch_size": (1, None, True),
    "runtime.max_queue_size": (1, None, True),
    "runtime.publish_every": (1, None, True),
    "runtime.ratio_tolerance": (0, None, False),
    "runtime.collector_timeout_s": (0, None, False),
    "runtime.max_restarts": (0, None, True),
    "runtime.shutdown_timeout_s": (0, None, False),
    "runtime.learner_threads": (1, None, True),
    "runtime.model_threads": (1, None, True),
    "runtime.collector_threads": (1, None, True),
    "runtime.ray.num_cpus_per_collector": (0, None, True),
    "runtime.ray.num_gpus_per_collector": (0, None, True),
}


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Schema defaults, then the YAML file, then ``key=value`` overrides; validated."""
    text = None
    if path is not None:
        path = Path(path)
        if path.is_dir():
            raise ConfigError(f"config {str(path)!r} is a directory; expected a YAML file such as "
                              "configs/pendulum_sac.yaml")
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        text = path.read_text()
    return config_from_yaml(text, overrides, source=str(path) if path is not None else "the config")


def config_from_yaml(text: str | None, overrides: list[str] | None = None, source: str = "the config") -> Config:
    """Like :func:`load_config` for YAML text (e.g. the config saved in a checkpoint); ``source`` names it
    in errors.
    """
    if text is not None:
        _check_yaml(text, source)
    try:
        # merging into the structured Config keeps it a DictConfig
        cfg: DictConfig = OmegaConf.structured(Config)
        if text is not None:
            cfg = cast(DictConfig, OmegaConf.merge(cfg, OmegaConf.create(text)))
        for item in overrides or []:
            if "=" not in item:
                raise ConfigError(f"override {item!r} is not of the form key=value (e.g. env.num_envs=8)")
            cfg = cast(DictConfig, OmegaConf.merge(cfg, OmegaConf.from_dotlist([item])))
    except OmegaConfBaseException as exc:
        raise ConfigError(_explain(exc)) from None
    config = cast(Config, OmegaConf.to_object(cfg))  # a structured DictConfig converts back to its dataclass
    _validate(config)
    return config


def _check_yaml(text: str, source: str) -> None:
    """YAML syntax and shape, with the file and line in the message (OmegaConf would name neither)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source} is not valid YAML: {problem}{where}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{source} holds a YAML {type(data).__name__} at the top level; expected a mapping of "
                          "config keys (e.g. 'seed: 0' and 'env:' with 'id: Pendulum-v1' under it)")


def to_yaml(config: Config) -> str:
    """The fully resolved config, as written to ``run_dir/config.yaml``."""
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def _get(config: Config, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _validate(config: Config) -> None:
    for key, allowed in _CHOICES.items():
        if _get(config, key) not in allowed:
            raise ConfigError(f"{key}={_get(config, key)!r} is not allowed; expected one of {', '.join(allowed)}")
    _check_finite(config)
    if not _DEVICE.match(config.device):
        raise ConfigError(f"device={config.device!r} is not allowed; expected auto, cpu, cuda or cuda:N")
    if config.env.device is not None and not _DEVICE.match(config.env.device):
        raise ConfigError(f"env.device={config.env.device!r} is not allowed; expected null, auto, cpu, cuda or cuda:N")
    ray = config.runtime.ray
    if ray.env_device is not None and not re.match(r"^(cpu|cuda(:\d+)?)$", ray.env_device):
        raise ConfigError(f"runtime.ray.env_device={ray.env_device!r} is not allowed; "
                          "expected null, cpu, cuda or cuda:N")
    if ray.num_cpus is not None and not ray.num_cpus > 0:
        raise ConfigError(f"runtime.ray.num_cpus={ray.num_cpus!r} is out of range; expected null or a value > 0")
    if ray.address is not None and not (ray.address == "auto" or re.match(r"^(ray://)?[\w.\-]+:\d+$", ray.address)):
        raise ConfigError(f"runtime.ray.address={ray.address!r} is not allowed; expected null (a private local Ray), "
                          "auto (the cluster this machine belongs to) or ray://host:port")
    for key, (low, high, low_inclusive) in _RANGES.items():
        value = _get(config, key)
        if value is None:  # an optional key left unset
            continue
        # Written so that every comparison with NaN fails the check instead of passing it.
        above_low = low is None or (value >= low if low_inclusive else value > low)
        below_high = high is None or value <= high
        if not (above_low and below_high):
            raise ConfigError(f"{key}={value!r} is out of range; expected a value in {_interval(key)}")
    for per, per_vector, what in (("agent.utd_ratio", "agent.updates_per_vector_step", "updates"),
                                  ("model.rollouts_per_real", "model.rollouts_per_vector_step", "rollouts")):
        if _get(config, per) is not None and _get(config, per_vector) is not None:
            raise ConfigError(f"{per}={_get(config, per)} and {per_vector}={_get(config, per_vector)} both set the "
                              f"{what} budget; set one of the two (the other is null)")
    if config.agent.n_step > 1 and config.agent.name != "sac":
        raise ConfigError(f"agent.n_step={config.agent.n_step} is for agent.name=sac (DQN's torchrl loss bootstraps "
                          "with one fixed gamma); use agent.n_step=1 with dqn")
    if config.agent.compile and config.agent.name != "sac":
        raise ConfigError("agent.compile=true is for agent.name=sac (DQN's update is torchrl's DQNLoss); "
                          "use agent.compile=false with dqn")
    if config.agent.obs_norm and config.agent.name != "sac":
        raise ConfigError("agent.obs_norm=true is for agent.name=sac (the normaliser lives in SAC's actor); "
                          "use agent.obs_norm=false with dqn")
    if config.agent.n_step > 1 and config.model.enabled:
        raise ConfigError(f"agent.n_step={config.agent.n_step} with model.enabled=true: the dynamics model learns "
                          "from 1-step transitions and its rollouts are 1-step; use agent.n_step=1 with MBPO")
    if not config.model.holdout_ratio < 1:
        raise ConfigError(f"model.holdout_ratio={config.model.holdout_ratio!r} is out of range; expected a value "
                          "in (0, 1): some real data must remain to train on")
    if config.model.num_elites > config.model.ensemble_size:
        raise ConfigError(f"model.num_elites={config.model.num_elites} is out of range; expected at most "
                          f"model.ensemble_size={config.model.ensemble_size}")
    m = config.model
    if len(m.weight_decay) != len(m.hidden_sizes) + 1 or not all(w >= 0 for w in m.weight_decay):
        raise ConfigError(f"model.weight_decay={m.weight_decay!r} is not allowed; expected "
                          f"{len(m.hidden_sizes) + 1} non-negative values (one per hidden layer plus the output)")
    s0, s1, l0, l1 = (m.rollout_schedule + [0, 0, 0, 0])[:4]
    if len(m.rollout_schedule) != 4 or s1 < s0 or l0 < 1 or l1 < 1:
        raise ConfigError(f"model.rollout_schedule={m.rollout_schedule!r} is not allowed; expected "
                          "[start_epoch, end_epoch, start_len, end_len] with end_epoch >= start_epoch and lengths >= 1")
    for key in ("agent.sac.hidden_sizes", "agent.sac.critic_hidden_sizes", "agent.dqn.hidden_sizes",
                "model.hidden_sizes"):
        sizes = _get(config, key)
        if sizes is None and key == "agent.sac.critic_hidden_sizes":
            continue
        if not sizes or any(s < 1 for s in sizes):
            raise ConfigError(f"{key}={sizes!r} is not allowed; expected a non-empty list of positive ints")
    _check_budgets(config)


def updates_per_transition(config: Config) -> float:
    """agent.utd_ratio in effect: as given, else updates_per_vector_step / num_envs, else 1."""
    return _per_transition(config.agent.utd_ratio, config.agent.updates_per_vector_step, config.env.num_envs, 1.0)


DEFAULT_ROLLOUTS_PER_REAL = 400.0
"""Branches per real transition when neither model.rollouts_per_real nor rollouts_per_vector_step is set."""


def rollouts_per_transition(config: Config) -> float:
    """model.rollouts_per_real in effect: as given, else rollouts_per_vector_step / num_envs, else 400."""
    return _per_transition(config.model.rollouts_per_real, config.model.rollouts_per_vector_step,
                           config.env.num_envs, DEFAULT_ROLLOUTS_PER_REAL)


def _per_transition(per_transition: float | None, per_vector_step: float | None, num_envs: int,
                    default: float) -> float:
    if per_transition is not None:
        return float(per_transition)
    if per_vector_step is not None:
        return float(per_vector_step) / num_envs
    return default


def _interval(key: str) -> str:
    """``_RANGES[key]`` as an interval, e.g. ``[0, 1]`` or ``(0, inf)`` (infinity itself is never allowed)."""
    low, high, low_inclusive = _RANGES[key]
    left = "(-inf" if low is None else f"{'[' if low_inclusive else '('}{low}"
    return f"{left}, {'inf)' if high is None else f'{high}]'}"


def _float_values(obj: Any, prefix: str = "") -> Iterator[tuple[str, str, float, bool]]:
    """``(dotted key, element key, value, optional)`` for every float in the config, found by walking the
    dataclass fields, so a float key added later is covered; a list element's key is ``key[i]``.
    """
    for f in dataclasses.fields(obj):
        key, value = prefix + f.name, getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _float_values(value, key + ".")
        elif isinstance(value, float):
            yield key, key, value, _admits_none(f.type)
        elif isinstance(value, (list, tuple)):
            yield from ((key, f"{key}[{i}]", v, False) for i, v in enumerate(value) if isinstance(v, float))


def _admits_none(annotation: object) -> bool:
    """Whether a field's annotation, as written (a string here), allows None: ``X | None`` or ``Optional[X]``."""
    text = str(annotation)
    return "None" in text or "Optional" in text


def _check_finite(config: Config) -> None:
    """nan and inf pass every ``<`` check (NaN compares False) and then break the run; refuse them up front."""
    for key, where, value, optional in _float_values(config):
        if math.isfinite(value) or key in _NONFINITE_OK:
            continue
        if key in _RANGES:
            expected = f"a value in {_interval(key)}"
        elif where != key:
            expected = f"finite numbers in {key}={_get(config, key)!r}"
        else:
            expected = "a finite number or null" if optional else "a finite number"
        raise ConfigError(f"{where}={value!r} is not a finite number; expected {expected}")


def _num(x: float) -> str:
    """A number for the arithmetic in a message: 19000, 0.5, 1e9, 1.9e13."""
    if float(x).is_integer() and abs(x) < 1e7:
        return str(int(x))
    return re.sub(r"e\+?(-?)0*(?=\d)", r"e\1", f"{x:.6g}")


def _floor3(x: float) -> float:
    """``x`` rounded down to 3 significant digits, so a printed limit is itself accepted."""
    if x <= 0:
        return 0.0
    scale = 10.0 ** (math.floor(math.log10(x)) - 2)
    return math.floor(x / scale) * scale


def _too_long(amount: float, per_s: int, what: str) -> str | None:
    """``"at an optimistic R what/s that is T, more than the 30-day limit"``, or None when it fits."""
    seconds = amount / per_s
    if seconds <= MAX_RUN_DAYS * 86_400:
        return None
    days, years = seconds / 86_400, seconds / (365 * 86_400)
    if days < 730:
        took = f"{days:,.0f} days"
    else:
        took = f"{years:,.0f} years" if years < 1e6 else f"{_num(years)} years"
    rate = f"{per_s:,}" if per_s < 1e7 else _num(per_s)
    return f"at an optimistic {rate} {what}/s that is {took}, more than the {MAX_RUN_DAYS}-day limit"


def _check_budgets(config: Config) -> None:
    """Refuse a run that can never finish, showing the arithmetic (the constants above say why the numbers)."""
    steps = config.total_env_steps
    too_long = _too_long(steps, OPTIMISTIC_ENV_STEPS_PER_S, "env steps")
    if too_long:
        fits = _floor3(OPTIMISTIC_ENV_STEPS_PER_S * MAX_RUN_DAYS * 86_400)
        raise ConfigError(f"total_env_steps={_num(steps)}: {too_long}; expected total_env_steps <= {_num(fits)}")

    a = config.agent
    utd = updates_per_transition(config)
    learning = max(steps - a.learning_starts, 0)
    updates = learning * utd
    too_long = _too_long(updates, OPTIMISTIC_UPDATES_PER_S, "updates")
    if too_long:
        fits = _floor3(OPTIMISTIC_UPDATES_PER_S * MAX_RUN_DAYS * 86_400 / learning)
        cap = "" if fits <= MAX_UTD_RATIO else f" (the time limit alone allows {_num(fits)}, but no recipe uses " \
            f"more than {MAX_UTD_RATIO:,} per transition)"
        raise ConfigError(
            f"agent.utd_ratio={_num(utd)} asks for (total_env_steps - agent.learning_starts) x utd_ratio = "
            f"({_num(steps)} - {_num(a.learning_starts)}) x {_num(utd)} = {_num(updates)} gradient updates; "
            f"{too_long}; expected agent.utd_ratio <= {_num(min(fits, MAX_UTD_RATIO))}{cap}, "
            "or fewer total_env_steps")
    if utd > MAX_UTD_RATIO:
        raise ConfigError(
            f"agent.utd_ratio={_num(utd)} is more than {MAX_UTD_RATIO:,} gradient updates per env transition; "
            "published recipes use 1-20 (REDQ/DroQ 20), so this is a typo (a total count rather than a ratio?); "
            f"expected agent.utd_ratio <= {MAX_UTD_RATIO}")

    m = config.model
    if not m.enabled:
        return
    longest = max(m.rollout_schedule[2], m.rollout_schedule[3])  # the schedule's longer end
    per_real = rollouts_per_transition(config)
    given = (f"model.rollouts_per_real={_num(per_real)} with a longest rollout of {longest} "
             f"(model.rollout_schedule={m.rollout_schedule})")
    rollout_steps = steps * per_real * longest
    too_long = _too_long(rollout_steps, OPTIMISTIC_MODEL_STEPS_PER_S, "model steps")
    if too_long:
        fits = _floor3(OPTIMISTIC_MODEL_STEPS_PER_S * MAX_RUN_DAYS * 86_400 / (steps * longest))
        raise ConfigError(
            f"{given} asks for total_env_steps x rollouts_per_real x longest rollout = {_num(steps)} x "
            f"{_num(per_real)} x {longest} = {_num(rollout_steps)} model rollout steps; {too_long}; "
            f"expected model.rollouts_per_real <= {_num(fits)} at this rollout length, or shorter rollouts")
    capacity = per_real * m.epoch_length * longest * m.retain_epochs
    if capacity > MAX_MODEL_BUFFER_TRANSITIONS:
        per_epoch = per_real * m.epoch_length * longest
        fix = (f"model.retain_epochs <= {MAX_MODEL_BUFFER_TRANSITIONS // per_epoch:.0f}"
               if per_epoch <= MAX_MODEL_BUFFER_TRANSITIONS else
               f"model.rollouts_per_real <= {_num(_floor3(MAX_MODEL_BUFFER_TRANSITIONS / (m.epoch_length * longest)))}")
        raise ConfigError(
            f"{given}, model.epoch_length={m.epoch_length} and model.retain_epochs={m.retain_epochs} size the model "
            f"buffer at rollouts_per_real x epoch_length x longest rollout x retain_epochs = "
            f"{_num(per_real)} x {m.epoch_length} x {longest} x {m.retain_epochs} = {_num(capacity)} "
            f"transitions, more than the {_num(MAX_MODEL_BUFFER_TRANSITIONS)} that any machine can hold "
            f"(36-168+ bytes each); expected at most {_num(MAX_MODEL_BUFFER_TRANSITIONS)}, e.g. {fix}")


def _explain(exc: OmegaConfBaseException) -> str:
    """OmegaConf's message, reduced to what was wrong and what is expected."""
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
    msg = str(exc).split("\n")[0]
    if type(exc).__name__ == "ConfigKeyError" or "not in struct" in msg:
        parent = key.rsplit(".", 1)[0] if key and "." in key else None
        known = sorted(_fields_at(parent))
        return f"unknown config key {key!r}; known keys{' under ' + parent if parent else ''}: {', '.join(known)}"
    if type(exc).__name__ == "ValidationError":
        return f"config key {key!r}: {msg}"
    return f"config error at {key!r}: {msg}" if key else f"config error: {msg}"


def _fields_at(dotted: str | None) -> list[str]:
    cls: Any = Config
    for part in (dotted.split(".") if dotted else []):
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        cls = _resolve_type(types.get(part))
        if cls is None:
            return []
    return [f.name for f in dataclasses.fields(cls)]


def _resolve_type(t: Any) -> Any:
    if isinstance(t, str):
        t = globals().get(t)
    return t if dataclasses.is_dataclass(t) else None


def describe(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, default, docstring)`` for every leaf field, read from the schema's source."""
    docs = _field_docstrings(cls)
    out: list[tuple[str, str, str]] = []
    instance = cls()
    for f in dataclasses.fields(cls):
        nested = _resolve_type(f.type)
        if nested is not None:
            out += describe(nested, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", repr(getattr(instance, f.name)), docs.get(f.name, "")))
    return out


def _field_docstrings(cls: type) -> dict[str, str]:
    class_def = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(class_def, ast.ClassDef), f"{cls.__name__}'s source is not a class definition"
    body = class_def.body
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
