"""A linear state-feedback controller: push the cart toward where the pole leans.

Observation: [cart position, pole angle, cart velocity, pole angular velocity]; the action is the
force on the cart, within [-3, 3]. These gains keep the pole up for all 1000 steps.
"""

GAINS = (1.0, 10.0, 1.0, 1.0)


def act(observation, info):
    force = sum(gain * value for gain, value in zip(GAINS, observation))
    return [max(-3.0, min(3.0, force))]
