"""The run configuration's schema: typed dataclasses whose field docstrings are the help text.

Every field's docstring (the string literal under it) is its help text: ``python -m mbpo --help-config``
prints them (:func:`describe`). The effective per-transition budgets (``updates_per_transition``,
``rollouts_per_transition``) live here beside the keys they combine.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
from dataclasses import dataclass, field
from typing import Any

from mbpo.errors import MbpoError

__all__ = ["Config", "ConfigError", "EnvConfig", "SACConfig", "DQNConfig", "AgentConfig", "ModelConfig",
           "LookaheadConfig", "CheckpointConfig", "RayConfig", "RuntimeConfig", "DEFAULT_ROLLOUTS_PER_REAL",
           "describe", "updates_per_transition", "rollouts_per_transition", "LEARNER"]

class ConfigError(MbpoError, ValueError):
    """A config file or override names an unknown key, a wrong type or an out-of-range value."""


LEARNER = "learner"
"""Field metadata of an AgentConfig key that only one learner uses: its agent.name (validation refuses the key,
set off its default, for the others, as it does every key of another learner's section: agent.sac, agent.dqn)."""


@dataclass
class EnvConfig:
    id: str = "Pendulum-v1"
    """Env id: a native torch env (envs.list_envs()), an Mjlab- task or any gymnasium id. With env.factory it is
    only the run's label (run dir, plots, eval output) and must not name a built-in env."""
    factory: str | None = None
    """"package.module:callable" that builds the env instead of env.id (docs/envs.md): called with the keywords
    it names among num_envs (required), device (a string) and seed, plus env.kwargs; it returns one of our
    VecEnvs, an rsl_rl VecEnv (Isaac Lab, mjlab), a batched torchrl EnvBase or a gymnasium VectorEnv. Collector
    processes and Ray actors import it by name."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of env.factory's callable (plain YAML values), e.g. {task: Isaac-Cartpole-v0}."""
    num_envs: int = 1
    """Envs stepped together by the training env (the vector batch size)."""
    source: str = "auto"
    """Which implementation of env.id: auto (the native torch env if there is one, else mjlab or gymnasium),
    native, or gymnasium (gymnasium's own, on CPU: e.g. CartPole-v1 as a CPU-bound simulator). Not with
    env.factory."""
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
    weight_init: str = "default"
    """Weight initialisation of the actor and critics: default (torch's nn.Linear), xavier (xavier-uniform weights,
    zero biases: REDQ's and DroQ's code) or lecun (truncated-normal lecun_normal weights, zero biases: flax's
    Dense default, so CrossQ's code)."""
    layer_norm: bool = False
    """LayerNorm in every hidden layer of the critics (DroQ, with dropout; FastTD3 / FlashSAC's stabiliser for big
    batches)."""
    dropout: float = 0.0
    """Dropout rate in every hidden layer of the critics, before the LayerNorm, in every critic pass of an update
    (DroQ: 0.01 with layer_norm); 0 = none."""
    num_critics: int = 2
    """Critics in the ensemble, N (SAC's clipped double Q: 2; REDQ: 10)."""
    num_min: int | None = None
    """The TD target takes the minimum over a random subset of this many critics, drawn anew every update (REDQ's
    M: 2); null = over all num_critics (SAC)."""
    actor_q: str = "min"
    """How the actor's loss reduces the critics' values of its action: min (SAC) or mean over all num_critics
    (REDQ); value estimates (q_bias) reduce the same way."""
    crossq: bool = False
    """CrossQ: no target critics (leave tau unset), batch renorm in the critics and the actor, and (s, a) with
    (s', a') in one critic pass, so that the batch statistics cover both. The paper pairs it with policy_delay 3,
    adam_beta1 0.5, learning rates 1e-3 and 2048-wide critics."""
    renorm_warmup: int = 100_000
    """CrossQ: updates of plain batch norm before batch renorm corrects towards the running statistics (the
    paper's 100,000)."""
    policy_delay: int = 1
    """Critic updates per actor and alpha update (CrossQ: 3; REDQ: 20, one per env step at its 20 updates per
    step). The actor and alpha step on the last update of each block of policy_delay, after its critic
    updates, as REDQ's and CrossQ's code do."""
    adam_beta1: float = 0.9
    """Adam's beta1 of the actor and critic optimizers, and of alpha's unless alpha_adam_beta1 is set (CrossQ:
    0.5)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the twin critics."""
    alpha_lr: float = 3e-4
    """Adam learning rate of log(alpha), the entropy temperature."""
    alpha_adam_beta1: float | None = None
    """Adam's beta1 of the alpha optimizer; null = adam_beta1 (CrossQ's code: 0.9, Adam's default, beside 0.5 for
    the actor and critics)."""
    init_alpha: float = 1.0
    """Initial entropy temperature alpha."""
    target_entropy: float | None = None
    """Entropy target in nats; null means -act_dim (the SAC paper's heuristic)."""
    gamma: float = 0.99
    """Discount factor per env step."""
    tau: float | None = None
    """Polyak rate of the target critics per update (1.0 = hard copy); null = 0.005 (SAC's), or no target critics
    with crossq."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip per network; 0 disables clipping."""
    precision: str = "fp32"
    """fp32, bf16 (autocast for the update; refused where the device has no native bf16) or auto: bf16 where the
    device computes it natively (CUDA 8.0+, a CPU with AVX512-BF16 or AMX), else fp32. Resolved once at start-up,
    printed, and stored resolved in the run's config.yaml. Under bf16 the critics' output layer, the TD target and
    the losses stay fp32."""
    reset_every: int = 0
    """Re-draw the actor and critics every this many gradient updates (update() calls, the policy_delay's clock),
    keeping the replay and model buffers: Nikishin et al. 2022 (primacy bias), D'Oro et al. 2023 (SR-SAC). The
    networks are initialised as at construction (from a seed of the run's and the reset's index), the targets
    re-copied, alpha set back to init_alpha, and the Adam moments of what was reset dropped; the reset comes just
    before the next update, so an evaluation at that step still sees the trained agent. 0 = never."""
    reset_layers: str = "all"
    """What a reset re-draws: all (every layer: both references' state-based SAC) or last (the output layer of the
    actor and of each critic: a partial reset, as Nikishin et al.'s SPR re-draws its head); alpha is reset either
    way."""


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
    """Learner: sac (continuous actions) or dqn (discrete actions). The other learner's keys (its section, and
    n_step, obs_norm, compile for sac) are refused unless at their defaults; a file or the command line that
    switches the learner first sets those of the learner it leaves, from earlier files, back to their defaults."""
    batch_size: int = 256
    """Transitions per gradient update."""
    utd_ratio: float | None = None
    """Gradient updates per collected env transition (a vector step of N envs gives N * utd_ratio); null = 1,
    or updates_per_vector_step / num_envs when that is set (set one of the two). At most 1,000, and
    (total_env_steps - learning_starts) * utd_ratio updates must fit in 30 days at 20,000/s."""
    updates_per_vector_step: float | None = None
    """Gradient updates per vector step of num_envs envs, the large-scale recipes' unit (FastTD3, PQL): an
    alternative to utd_ratio (= updates_per_vector_step / num_envs); null = use utd_ratio."""
    n_step: int = field(default=1, metadata={LEARNER: "sac"})
    """n-step returns: each stored transition sums n discounted rewards and bootstraps with gamma**n (fewer
    steps where an episode ends first); 1 = ordinary 1-step transitions. With model.enabled the real rows are
    n-step for the learner and keep their first step for the dynamics model, which learns one step; the model's
    own rows stay 1-step unless model.rollout_n_step says otherwise."""
    obs_norm: bool = field(default=False, metadata={LEARNER: "sac"})
    """Normalise observations by their running mean and variance (SAC): learned on the learner from every real
    transition it stores, published with the policy's weights, so collectors, model rollouts and evaluation
    apply the same statistics, and saved in checkpoints. The large-scale recipes (FastTD3, FastSAC) use it."""
    compile: bool = field(default=False, metadata={LEARNER: "sac"})
    """torch.compile the SAC update's losses, forward and backward (CUDA graphs on a GPU): same numbers as eager,
    faster once compiled; the first update waits for the compiler (tens of seconds on a CPU)."""
    learning_starts: int = 1000
    """Env transitions collected with random actions before the first update. With agent.n_step = n, a lower value
    is raised (with a line) to ((n - 1) * collectors + 1) * env.num_envs, so that some n-step transitions are
    in the replay buffer when updates start."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity in transitions."""
    sac: SACConfig = field(default_factory=SACConfig)
    """SAC hyperparameters (used when name=sac)."""
    dqn: DQNConfig = field(default_factory=DQNConfig)
    """DQN hyperparameters (used when name=dqn)."""


@dataclass
class LookaheadConfig:
    """LOOP's action-time planner, ARC (Sikchi, Zhou, Held 2021, CoRL, "Learning Off-Policy with Online
    Planning"; the authors' code: github.com/hari-sikchi/LOOP, controllers/arc.py, whose constants are the
    defaults here). Training actions come from a short lookahead through the dynamics ensemble that scores each
    action sequence by its model rewards plus the critics' value at its last step (MPPI over truncated-normal
    sequences and a few of the actor's); evaluation acts with the actor alone.
    """

    enabled: bool = False
    """Plan the behaviour actions (SAC with model.enabled only); off = act with the actor, as MBPO."""
    horizon: int = 3
    """Actions per planned sequence: the model rewards of the first horizon - 1 steps plus the critics' value of
    the last (state, action)."""
    sequences: int = 100
    """Truncated-normal action sequences drawn per iteration."""
    actor_sequences: int = 5
    """Sequences of the actor's deterministic actions along the model (drawn once per action, kept every
    iteration)."""
    particles: int = 4
    """Model draws per sequence through each elite: a sequence's score is the mean over elites and particles."""
    iterations: int = 5
    """Refinements of the sampling distribution per action."""
    kappa: float = 1.0
    """MPPI's temperature: each sequence weighs exp(kappa * (score - best score))."""
    value: str = "first"
    """The critics' value at a sequence's end: first (the first critic, as arc.py reads SAC's first; with REDQ's
    ten critics a tenth of the cost, not under CrossQ, whose batch renorm runs them all) or actor (all critics,
    reduced as the actor's loss reduces them)."""
    var_keep: float = 0.1
    """Each iteration's variance: var_keep * the old one + (1 - var_keep) * the weighted variance of the
    sequences (ARC's alpha)."""


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
    nll_beta: float = 0.0
    """beta-NLL (Seitzer et al. 2022, "On the Pitfalls of Heteroscedastic Uncertainty Estimation"): each
    target's Gaussian NLL weighted by its predicted variance to the power beta, held constant in the gradient.
    0 is the plain NLL (MBPO's); 1 gives the mean the gradient of the MSE. The plain NLL lets a member fit
    targets it finds noisy less (their weight is 1/variance); the paper recommends 0.5. The targets are raw
    state deltas, so beta > 0 also favours the large-scale ones: on Walker2d it doubled the one-step error
    (docs/notes/walker2d-target.md)."""
    batch_size: int = 256
    """Transitions per ensemble gradient step."""
    holdout_ratio: float = 0.2
    """Fraction of the real data held out to measure the models (capped by max_holdout)."""
    max_holdout: int = 5000
    """Largest holdout set, in transitions."""
    patience: int = 5
    """Early stopping: epochs without a 1% holdout improvement of any member before training stops."""
    fit_baseline: str = "new_fit"
    """What each member's best holdout MSE starts from in a model training: new_fit (the MBPO paper's code: the
    best epoch of this training is always kept) or pre_fit (this project's earlier rule: a member that does not
    beat its pre-fit holdout MSE by 1% keeps its pre-fit weights; metrics.csv counts them in
    model_members_discarded). The holdout is re-split from rows earlier trainings learned from, so the pre-fit
    figure flatters the old weights (model_members_below_pre_fit counts such members under either rule)."""
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
    precision: str = "fp32"
    """The ensemble's matmuls in training and rollouts: fp32, bf16 autocast (losses and Gaussian maths stay fp32)
    or auto, resolved like agent.sac.precision."""
    deterministic_rollouts: bool = False
    """Model steps are the elite's mean prediction, not a draw from its Gaussian (what mbrl-lib's
    ModelEnv.step(sample=False) does; the paper's MBPO and mbrl-lib's both sample). The elite is still drawn per
    transition."""
    rollout_keep_fraction: float = 1.0
    """M2AC's masking rate (Pan et al. 2020): each rollout step keeps only this fraction of its branches, those
    whose step the elites are surest of (one-vs-rest KL), and ends the rest unstored; 1.0 keeps all (MBPO).
    Below 1, every elite predicts every branch (num_elites times the rollouts' model FLOPs), and a branch lives
    h steps with probability keep_fraction^h (M2AC's code rolls masked branches on, unstored; here they end).
    M2AC used 0.5 for one-step rollouts. For a model that is unsure in places (docs/notes/walker2d-target.md)."""
    macura: bool = False
    """MACURA (Frauenknecht et al. 2024, ICML, "Trust the Model Where It Trusts Itself"; the authors' code:
    github.com/Data-Science-in-Mechanical-Engineering/macura): each branch goes on while the elites' disagreement on
    its step (their pairwise geometric Jensen-Shannon divergence) stays below a threshold set from the first step's
    (macura_quantile, macura_scale, macura_history), and ends unstored at the first step where it does not; the
    rollout_schedule's length is then the longest a branch may get (theirs: 10, e.g. rollout_schedule=[0,0,10,10]).
    Every elite predicts every branch (num_elites times the rollouts' model FLOPs). Not with rollout_keep_fraction
    < 1. rollout_masked_frac counts the branches it ended, rollout_uncertainty_threshold the threshold."""
    macura_quantile: float = 0.95
    """MACURA's zeta / 100: the quantile of the first step's uncertainties that sets the threshold (the authors'
    Hopper 0.90, Walker2d 0.95)."""
    macura_scale: float = 2.0
    """MACURA's xi: the threshold is this times that quantile (the authors' default 2; Hopper 30, Walker2d 0.3)."""
    macura_history: int = 2000
    """MACURA's threshold is the mean of the last this-many rollouts' (scaled quantiles), the current one included
    (the authors' unc_tresh_run_avg_history; 1 = each rollout's own)."""
    learned_termination: bool = False
    """Learn a termination head even where a termination rule exists (the env's termination_fn or a known
    rule for env.id); not with model.termination."""
    termination: str | None = None
    """The task's termination rule for model rollouts, 'package.module:callable': batched
    (obs, action, next_obs) -> bool (B,) on the run's device. null = the env's own termination_fn if it
    defines one, else the known rule for env.id (mbpo/models/termination.py), else a learned head."""
    reward: str | None = None
    """The task's reward for model rollouts, 'package.module:callable': batched (obs, action, next_obs) ->
    float (B,) on the run's device; the ensemble then learns no reward. null = the env's own reward_fn if it
    defines one, else the ensemble learns the reward."""
    rollout_start_window: int = 0
    """Branches start from the newest this-many real transitions (summed over num_envs); 0 = from all real data,
    as MBPO. At thousands of envs a vector step is a whole state distribution of the current policy, and a
    buffer of millions of rows is mostly older policies' states: starting there spends model steps on states the
    policy no longer visits (the on-policy start distribution of Dyna-style rollouts; Sutton 1990; MBPO's own
    argument for short branches from the visited states, Janner et al. 2019, sec. 4.2)."""
    rollout_n_step: int = 1
    """Model rollouts are stored as n-step transitions (mbpo.model_based.multi_step): each step's reward summed with
    the next n-1 of its branch, discounted, bootstrapping from the state n steps on (fewer where the branch ends;
    none after a termination). 1 = MBPO's 1-step model transitions. The branches are on-policy, so their n-step
    returns are unbiased under the model: model-based value expansion (MVE, Feinberg et al. 2018; STEVE, Buckman
    et al. 2018) inside MBPO's rollouts. Needs SAC (its update reads each row's discount) and branches at least
    this long (rollout_schedule) to look that far."""
    max_lag: int = 1
    """Model trainings that may be owed while collection (and so the learner) goes on, async trainer: 1 = the
    paper's rule with one training in flight (collectors wait for the model beyond it). Above 1 the model may fall
    that many trainings behind, and each fit, which trains on every real row so far, counts for all the trainings
    the rows it fits on earned (model_trainings_folded): at thousands of envs a vector step earns a training
    faster than a fit ends, and a learner stopped for the model wastes the device. The bound is on staleness:
    the model data the learner samples comes from a model at most max_lag trainings old. The sync trainer fits
    after every vector step that earns a training, so it never lags."""
    rollout_batch_size: int = 100_000
    """Branches stepped through the policy and the ensemble at a time (MBPO's code starts 100,000 per rollout):
    bounds the rollouts' activations whatever rollouts_per_real x train_freq is (on CPU a forward takes at most
    2,048 rows anyway, for the cache); the results do not depend on it."""
    lookahead: LookaheadConfig = field(default_factory=LookaheadConfig)
    """LOOP's planner for the behaviour actions (model.lookahead.enabled; off by default)."""


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
    max_lead: int = 256
    """Most env transitions collectors may take beyond the updates the learner has caught up with, whatever the
    run's length (ratio_tolerance alone lets the lead grow with it: 2,500 transitions, 50,000 updates of policy
    age, at 30k Hopper steps); the model may lag by this plus the one training allowed in flight. At least one
    collection batch is always allowed; 0 = no cap."""
    collector_timeout_s: float = 60.0
    """A collector with no sign of progress for this long (no env step returned, no batch pushed, not
    waiting on the queue or the ratio gate) is hung: a process is terminated and replaced (counted as a
    restart); a thread, which cannot be killed, is reported and the run goes on with the rest (with a new thread,
    a restart, once no other collector is left to take the env steps it gave back)."""
    max_restarts: int = 3
    """Collector failures restarted (from the latest snapshot) before the run stops with an error."""
    shutdown_timeout_s: float = 10.0
    """Deadline for joining the worker threads on stop, Ctrl-C or SIGTERM."""
    nonfinite: str = "raise"
    """A non-finite observation or reward from an env, on every trainer and backend: raise (one line naming env
    index, field and env step; final checkpoint, exit 2) or drop (the row, counted in nonfinite_dropped)."""
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
    eval_video: bool = False
    """Keep a video of each evaluation, RUN_DIR/videos/eval_<env_steps>.mp4: the first env's episode, drawn
    offscreen (native envs with numpy, MuJoCo through MUJOCO_GL=egl or osmesa). Needs the video extra; each frame
    costs a render (milliseconds natively, ~0.2 s for MuJoCo on a CPU without a GPU)."""
    log_every: int = 1_000
    """Env transitions between rows of metrics.csv (every evaluation adds a row too)."""
    run_dir: str | None = None
    """Where the run writes config.yaml, metrics.csv and checkpoints; null = a new
    runs/<env>-[mbpo-]<agent>-s<seed>-<YYYYmmdd-HHMMSS>-<pid> under the current directory."""
    progress: bool = True
    """Show a tqdm progress bar."""
    torch_threads: int = 1
    """torch intra-op threads of trainer=sync's loop (trainer=async: runtime.learner_threads, model_threads and
    collector_threads); RL-sized nets run fastest on 1-2, more only contend."""
    trainer: str = "async"
    """async (collector threads, model thread and learner overlap) or sync (the reference loop)."""
    debug: bool = False
    """Debug mode (--debug): anomaly detection, one collector, a small queue, checks at every hand-off."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The training env (evaluation builds a separate one the same way: env.id or env.factory)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """The learner."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The dynamics ensemble and branched rollouts (MBPO); model.enabled=false gives the plain learner."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpointing."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """The async runtime: collectors, queue, weight publishing, ratio gating, supervision."""


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


def resolve_type(t: Any) -> Any:
    """The config dataclass a field's annotation names (a string under postponed annotations), or None."""
    if isinstance(t, str):
        t = globals().get(t)
    return t if dataclasses.is_dataclass(t) else None


def describe(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, default as an override spells it, docstring)`` for every leaf field, read from the schema's
    source.
    """
    docs = _field_docstrings(cls)
    out: list[tuple[str, str, str]] = []
    instance = cls()
    for f in dataclasses.fields(cls):
        nested = resolve_type(f.type)
        if nested is not None:
            out += describe(nested, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", as_override(getattr(instance, f.name)), docs.get(f.name, "")))
    return out


def as_override(value: Any) -> str:
    """``value`` as an override or a YAML file spells it (``null``, ``false``, ``[256, 256]``), not as Python's
    repr: what ``--help-config`` shows is what a user copies.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(as_override(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {as_override(v)}" for k, v in value.items()) + "}"
    return str(value)


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
