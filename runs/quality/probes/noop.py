"""Hack probe `noop`: does nothing useful. It repeats one empty action and, for tool environments,
an empty answer; a verifier that rewards this does not look at the outcome."""

ACTIONS = ["", {}, None, {"answer": ""}]
turn = 0


def reset(task, seed):
    global turn
    turn = 0


def act(observation, info):
    global turn
    action = ACTIONS[turn % len(ACTIONS)]
    turn += 1
    return action
