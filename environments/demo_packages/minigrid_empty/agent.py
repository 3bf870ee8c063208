"""Walk the Empty room's top row, then down its last column to the goal, from the agent's own view.

MiniGrid's observation "image" is the 7x7 egocentric view, indexed [x][y][channel]; the agent stands at
(3, 6) facing up the view, so the cell in front is (3, 5). Channel 0 is the object type, numbered as
MiniGrid numbers it: the agent imports minigrid from the version's dependency environment, as the
environment does.
"""

from minigrid.core.constants import OBJECT_TO_IDX

WALL = OBJECT_TO_IDX["wall"]
TURN_RIGHT, FORWARD = 1, 2


def act(observation, info):
    in_front = observation["image"][3][5][0]
    if in_front == WALL:
        return TURN_RIGHT
    return FORWARD
