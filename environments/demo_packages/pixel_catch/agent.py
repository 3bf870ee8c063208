"""Reads the screen (a numpy array) like a pixel agent would: finds the ball and the paddle by their
colours and moves the paddle under the ball."""

import numpy as np

BALL_RED, PADDLE_RED = 236, 200  # the red channel tells them apart from the blue background
PADDLE_Y = 190


def act(observation, info):
    red = np.asarray(observation)[:, :, 0]
    ball = np.nonzero((red[14:PADDLE_Y] == BALL_RED).any(axis=0))[0]
    paddle = np.nonzero(red[PADDLE_Y] == PADDLE_RED)[0]
    if not len(ball) or not len(paddle):
        return 0
    target, centre = ball.mean(), paddle.mean()
    if target < centre - 3:
        return 1
    if target > centre + 3:
        return 2
    return 0
