"""Shortest safe path on the task's Frozen Lake map (breadth-first search from the goal)."""

from collections import deque

MAPS = {
    "4x4": ["SFFF", "FHFH", "FFFH", "HFFG"],
    "8x8": [
        "SFFFFFFF",
        "FFFFFFFF",
        "FFFHFFFF",
        "FFFFFHFF",
        "FFFHFFFF",
        "FHHFFFHF",
        "FHFFHFHF",
        "FFFHFFFG",
    ],
}
LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
MOVES = {LEFT: (0, -1), DOWN: (1, 0), RIGHT: (0, 1), UP: (-1, 0)}

policy = {}


def plan(rows):
    """Action per cell that moves one step closer to the goal without stepping on a hole."""
    height, width = len(rows), len(rows[0])
    goal = next((r, c) for r in range(height) for c in range(width) if rows[r][c] == "G")
    distance = {goal: 0}
    best = {}
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for action, (dr, dc) in MOVES.items():
            # The cell we came from is (r - dr, c - dc); taking `action` there leads here.
            pr, pc = r - dr, c - dc
            if 0 <= pr < height and 0 <= pc < width and rows[pr][pc] != "H" and (pr, pc) not in distance:
                distance[(pr, pc)] = distance[(r, c)] + 1
                best[pr * width + pc] = action
                queue.append((pr, pc))
    return best


def reset(task, seed):
    global policy
    kwargs = task.get("kwargs", {})
    rows = kwargs.get("desc") or MAPS[kwargs.get("map_name", "4x4")]
    policy = plan(["".join(row) for row in rows])


def act(observation, info):
    if not policy:
        reset({}, 0)
    return policy.get(int(observation), DOWN)
