"""Native pure-torch batched classic-control envs that reproduce gymnasium's."""

from envs.classic.acrobot import ACROBOT
from envs.classic.cartpole import CARTPOLE
from envs.classic.core import ClassicTask, ClassicVecEnv
from envs.classic.mountain_car_continuous import MOUNTAIN_CAR_CONTINUOUS
from envs.classic.pendulum import PENDULUM

TASKS: dict[str, ClassicTask] = {
    t.env_id: t for t in (PENDULUM, CARTPOLE, MOUNTAIN_CAR_CONTINUOUS, ACROBOT)
}

__all__ = ["TASKS", "ClassicTask", "ClassicVecEnv"]
