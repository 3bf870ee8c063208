"""The optimal policy of the task's Frozen Lake, found by value iteration over its real dynamics (on a
slippery lake the intended move happens a third of the time, each perpendicular one a third): the
shortest safe path on a firm lake, the safest route on a slippery one. It is the package's reference
solution ([quality] oracle): it solves every task on most seeds, though not on every one, since a
slippery lake can throw any policy into a hole (environment.toml declares those tasks stochastic, with the pass rate the audit expects at least)."""

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


def plan(rows, slippery, sweeps=500):
    height, width = len(rows), len(rows[0])

    def moved(r, c, action):
        dr, dc = MOVES[action]
        return min(max(r + dr, 0), height - 1), min(max(c + dc, 0), width - 1)

    def outcomes(r, c, action):
        actions = [(action - 1) % 4, action, (action + 1) % 4] if slippery else [action]
        return [moved(r, c, a) for a in actions]

    value = {(r, c): 0.0 for r in range(height) for c in range(width)}
    best = {}
    for _ in range(sweeps):
        for r in range(height):
            for c in range(width):
                if rows[r][c] in "HG":
                    continue
                scores = []
                for action in MOVES:
                    ends = outcomes(r, c, action)
                    scores.append((sum(1.0 if rows[er][ec] == "G" else 0.999 * value[(er, ec)] for er, ec in ends) / len(ends), action))
                value[(r, c)], best[r * width + c] = max(scores)
    return best


def reset(task, seed):
    global policy
    kwargs = task.get("kwargs", {})
    rows = ["".join(row) for row in (kwargs.get("desc") or MAPS[kwargs.get("map_name", "4x4")])]
    policy = plan(rows, bool(kwargs.get("is_slippery", True)))


def act(observation, info):
    if not policy:
        reset({}, 0)
    return policy.get(int(observation), DOWN)
