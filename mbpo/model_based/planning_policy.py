"""The behaviour policy under model.lookahead: the agent's actions planned through the ensemble (LOOP's ARC).

Collectors act through :class:`PlanningPolicy` in place of the agent: exploring actions come from
:class:`~mbpo.model_based.lookahead.Lookahead`, deterministic ones (evaluation) from the actor. A collector's
replica of the ensemble loads from the published snapshot's ``model`` entry (the ensemble as of its last
finished fit), as its agent loads the actor and critics from the rest, so every backend gets the model the way
it gets the weights. Before the first fit there is nothing to plan with, and the actor acts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch

from mbpo.config import ModelConfig
from mbpo.config.seeding import derive
from mbpo.model_based.lookahead import Lookahead
from mbpo.models.ensemble import DynamicsEnsemble
from mbpo.models.rules import ModelRules, model_rules

__all__ = ["PlanningPolicy", "MODEL_KEY"]

MODEL_KEY = "model"
"""The published snapshot's entry that holds :meth:`DynamicsEnsemble.acting_state`."""


class PlanningPolicy:
    """``act`` and ``load_snapshot`` as the agent's, with exploring actions planned by ARC."""

    def __init__(self, agent: Any, ensemble: DynamicsEnsemble, rules: ModelRules, config: ModelConfig,
                 action_space: gym.spaces.Space, seed: int) -> None:
        self.agent, self.ensemble = agent, ensemble
        self.planner = Lookahead(config.lookahead, agent, ensemble, rules.termination, rules.reward, action_space,
                                 derive(seed, "lookahead"))
        self.planned = False
        """Whether the last exploring action was planned (False before the first fit: the actor's)."""

    @classmethod
    def replica(cls, agent: Any, config: ModelConfig, env_id: str, observation_space: gym.spaces.Box,
                action_space: gym.spaces.Space, env: object, seed: int) -> PlanningPolicy:
        """A collector's planner: a replica of the ensemble on the agent's device, in fp32 where model.precision
        says fp32, else in the precision that device computes natively (model.precision=auto/bf16 was resolved for
        the learner's device, which may be a GPU), with the run's rules for ``env_id`` (and ``env``'s own), to be
        filled by :meth:`load_snapshot`.
        """
        rules = model_rules(config, env_id, env)
        ensemble = DynamicsEnsemble(config, int(observation_space.shape[0]), action_space, agent.device,
                                    learn_termination=rules.termination is None, learn_reward=rules.reward is None,
                                    precision="fp32" if config.precision == "fp32" else "auto")
        return cls(agent, ensemble, rules, config, action_space, seed)

    def act(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """CPU actions ``(N, act_dim)``: planned when exploring with a fitted model, else the agent's."""
        if not explore:
            return self.agent.act(obs, explore)
        self.planned = self.ensemble.version > 0
        return self.planner.plan(obs).cpu() if self.planned else self.agent.act(obs, explore)

    def end_episodes(self, done: torch.Tensor) -> None:
        """Forget the warm starts of the envs whose episode ended."""
        self.planner.end_episodes(done)

    def state_dict(self) -> dict[str, Any]:
        """The planner's own state (warm starts, generator); the weights are the agent's and the model's."""
        return self.planner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.planner.load_state_dict(state)

    def load_snapshot(self, snapshot: Mapping[str, Any]) -> None:
        """The agent's weights, and the ensemble's where the snapshot carries a newer fit."""
        self.agent.load_snapshot(snapshot)
        model = snapshot.get(MODEL_KEY)
        if model is not None and int(model["version"]) != self.ensemble.version:
            self.ensemble.load_acting_state(model)
