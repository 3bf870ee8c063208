"""Plays Pong from the screen, as a pixel agent would: finds the ball and its own (green, right-hand)
paddle by their colours and moves the paddle to meet the ball. It imports numpy from the version's
dependency environment, the same one the environment runs in.

The frame is ALE's 210x160x3 RGB screen; the playing field is rows 34-193. In Pong, RIGHT moves the
paddle up and LEFT moves it down.
"""

import numpy as np

NOOP, FIRE, UP, DOWN = 0, 1, 2, 3
FIELD_TOP, FIELD_BOTTOM = 34, 194
PADDLE_COLUMNS = slice(140, 144)
PADDLE_RED, BALL_RED = 92, 236  # the red channel tells them apart from the brown field


def act(observation, info):
    red = np.asarray(observation)[FIELD_TOP:FIELD_BOTTOM, :, 0]
    paddle = np.nonzero((red[:, PADDLE_COLUMNS] == PADDLE_RED).any(axis=1))[0]
    ball = np.nonzero(red == BALL_RED)[0]
    if not len(paddle):
        return NOOP
    if not len(ball):
        return FIRE  # serve
    target, centre = ball.mean(), paddle.mean()
    if target < centre - 2:
        return UP
    if target > centre + 2:
        return DOWN
    return NOOP
