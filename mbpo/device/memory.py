"""Memory: what the networks of a run take (for the start-up check), and giving freed heap memory back to the OS.

The trainer's start-up check (mbpo.trainers.memory_check) adds :func:`network_bytes` to the buffers' bytes, so a run
whose networks cannot fit (agent.sac.num_critics=100000000) is refused in one line before anything is allocated.

torch's CPU tensors live on the C heap. A model cycle (ensemble fit, then rollouts) allocates and
frees tens of MB of temporaries while the learner and the collectors allocate in their own threads;
glibc keeps what is freed in per-thread arenas for reuse, so without a trim the resident set climbs
to the sum of every arena's high-water mark: about 0.5 GB on top of the 0.3 GB in use in the default
run (docs/notes/rollout-memory.md).
"""

from __future__ import annotations

import ctypes
import itertools
import sys
from collections.abc import Callable, Sequence

from mbpo.config import AgentConfig, ModelConfig

__all__ = ["release_free_memory", "mlp_params", "network_bytes", "TRAINED_COPIES"]

TRAINED_COPIES = 4
"""fp32 copies of a trained network's parameters on its device: the weights, their gradients and Adam's two
moments (bf16 autocast keeps fp32 weights)."""


def mlp_params(in_dim: int, hidden_sizes: Sequence[int], out_dim: int) -> int:
    """Weights and biases of an MLP ``in_dim -> hidden_sizes -> out_dim`` (per member of an ensemble)."""
    sizes = [in_dim, *hidden_sizes, out_dim]
    return sum((i + 1) * o for i, o in itertools.pairwise(sizes))


def network_bytes(agent: AgentConfig, model: ModelConfig | None, obs_dim: int, act_dim: int) -> tuple[int, int]:
    """``(learner, ensemble)``: about the bytes the learner's networks and the dynamics ensemble (``model``, or
    None when it is off) hold on the run's device, from the config alone: parameters times
    :data:`TRAINED_COPIES`, plus the target networks (SAC's critics unless CrossQ, DQN's Q-net). A floor:
    activations, norms and the collectors' CPU replicas come on top. ``act_dim`` is the number of actions of a
    discrete env (DQN's outputs, the ensemble's one-hot input).
    """
    if agent.name == "sac":
        sac = agent.sac
        actor = mlp_params(obs_dim, sac.hidden_sizes, 2 * act_dim)
        critics = sac.num_critics * mlp_params(obs_dim + act_dim, sac.critic_hidden_sizes or sac.hidden_sizes, 1)
        learner = TRAINED_COPIES * (actor + critics) + (0 if sac.crossq else critics)
    else:
        q_net = mlp_params(obs_dim, agent.dqn.hidden_sizes, act_dim)
        learner = (TRAINED_COPIES + 1) * q_net
    # outputs: mean and log-variance of the next obs and the reward, and a termination logit
    ensemble = 0 if model is None else TRAINED_COPIES * model.ensemble_size * mlp_params(
        obs_dim + act_dim, model.hidden_sizes, 2 * (obs_dim + 1) + 1)
    return 4 * learner, 4 * ensemble


def _glibc_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, ...): nothing to trim this way
        return None


_MALLOC_TRIM = _glibc_malloc_trim()


def release_free_memory() -> None:
    """``malloc_trim(0)``: return the free pages of every arena to the OS (glibc only; a no-op elsewhere).

    A few milliseconds on a GB-sized heap; call it after a burst of temporaries, not per step.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
