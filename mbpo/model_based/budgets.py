"""When the model trains: MBPO's budget arithmetic, which the model's learner (under either trainer) and the async
gate share. Apart from the learner so that the gate, which collector processes and Ray actors import, does not
bring torchrl's replay buffers into every child.
"""

from __future__ import annotations

__all__ = ["budget_start", "trainings_earned"]


def budget_start(train_freq: int, learning_starts: int) -> int:
    """The env step the model's budgets count from: one ``train_freq`` before the first training, which is
    at the first multiple of ``train_freq`` at or after ``learning_starts`` (the paper's first model comes
    right after its random steps and starts one rollout_batch_size of branches).
    """
    return (max(-(-learning_starts // train_freq), 1) - 1) * train_freq


def trainings_earned(env_steps: int, train_freq: int, start: int, num_envs: int = 1) -> int:
    """Model trainings due after ``env_steps`` real transitions (whole vector steps of ``num_envs``), counting
    from ``start`` (:func:`budget_start`): one at every multiple of ``train_freq`` after it, at most one per
    vector step, as the sync trainer fits once after a vector step however many multiples it crossed. The async
    gate counts the same way, so a collection batch of several vector steps earns several trainings at once: its
    model thread fits once for each on that batch's data, unless ``model.max_lag`` > 1 folds them into one fit.
    """
    if num_envs <= train_freq:  # a vector step crosses at most one multiple
        return max((env_steps - start) // train_freq, 0)
    first = -(-(start + train_freq) // num_envs)  # every vector step crosses one; the first to reach the first
    return max(env_steps // num_envs - first + 1, 0)
