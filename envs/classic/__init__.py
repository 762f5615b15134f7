"""Native pure-torch batched classic-control envs that reproduce gymnasium's."""

from envs.classic.acrobot import ACROBOT
from envs.classic.cartpole import CARTPOLE
from envs.classic.core import ClassicTask, ClassicVecEnv
from envs.classic.mountain_car_continuous import MOUNTAIN_CAR_CONTINUOUS
from envs.classic.pendulum import PENDULUM
from envs.classic.point_mass import POINT_MASS

TASKS: dict[str, ClassicTask] = {
    t.env_id: t for t in (PENDULUM, CARTPOLE, MOUNTAIN_CAR_CONTINUOUS, ACROBOT)
}

TOY_TASKS: dict[str, ClassicTask] = {POINT_MASS.env_id: POINT_MASS}
"""Native tasks with no gymnasium counterpart (used by the smoke stages and tests)."""

__all__ = ["TASKS", "TOY_TASKS", "ClassicTask", "ClassicVecEnv"]
