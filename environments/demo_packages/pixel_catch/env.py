"""Pixel catch: balls fall from the top of a 210x160 screen; move the paddle to catch them.

Observation: the screen, a (210, 160, 3) uint8 array, as an Atari environment gives it.
Actions: 0 stay, 1 left, 2 right. Reward +1 for a catch, -1 for a miss. The episode ends after the
task's number of balls; verify() judges the share caught.
"""

import numpy as np
from studio_sdk import Environment

HEIGHT, WIDTH = 210, 160
PADDLE_Y, PADDLE_W, PADDLE_H, PADDLE_SPEED = 190, 20, 4, 6
BALL = 4
BACKGROUND = (0, 28, 136)
PADDLE_COLOR = (200, 72, 72)
BALL_COLOR = (236, 236, 236)
SCORE_COLOR = (252, 188, 116)
MISS_COLOR = (110, 110, 110)


class PixelCatch(Environment):
    action_space = {"type": "discrete", "n": 3, "names": ["STAY", "LEFT", "RIGHT"]}

    def reset(self, task, seed):
        self.seed_rng(seed, task["id"])
        self.balls_total = int(task.get("balls", 3))
        self.speed = int(task.get("speed", 3))
        self.paddle_x = (WIDTH - PADDLE_W) // 2
        self.caught = self.missed = 0
        self.background = np.empty((HEIGHT, WIDTH, 3), dtype=np.uint8)
        self.background[:] = BACKGROUND
        self._new_ball()
        return self._render()

    def _new_ball(self):
        self.ball_x = self.rng.randrange(0, WIDTH - BALL)
        self.ball_y = 20
        self.ball_dx = self.rng.choice([-2, -1, 1, 2])

    def step(self, action):
        move = {0: 0, 1: -PADDLE_SPEED, 2: PADDLE_SPEED}.get(int(action), 0)
        self.paddle_x = min(max(self.paddle_x + move, 0), WIDTH - PADDLE_W)
        self.ball_x += self.ball_dx
        if self.ball_x <= 0 or self.ball_x >= WIDTH - BALL:
            self.ball_dx = -self.ball_dx
            self.ball_x = min(max(self.ball_x, 0), WIDTH - BALL)
        self.ball_y += self.speed
        reward = 0.0
        if self.ball_y + BALL >= PADDLE_Y:
            if self.paddle_x - BALL < self.ball_x < self.paddle_x + PADDLE_W:
                self.caught += 1
                reward = 1.0
            else:
                self.missed += 1
                reward = -1.0
            self._new_ball()
        done = self.caught + self.missed >= self.balls_total
        info = {"caught": self.caught, "missed": self.missed}
        return self._render(), reward, done, False, info

    def _render(self):
        frame = self.background.copy()
        for i in range(min(self.caught, 7)):  # the score: a block per catch, grey ones per miss
            frame[4:12, 4 + i * 10:12 + i * 10] = SCORE_COLOR
        for i in range(min(self.missed, 7)):
            frame[4:12, WIDTH - 12 - i * 10:WIDTH - 4 - i * 10] = MISS_COLOR
        frame[self.ball_y:self.ball_y + BALL, self.ball_x:self.ball_x + BALL] = BALL_COLOR
        frame[PADDLE_Y:PADDLE_Y + PADDLE_H, self.paddle_x:self.paddle_x + PADDLE_W] = PADDLE_COLOR
        return frame

    def verify(self):
        share = self.caught / self.balls_total
        return share, f"caught {self.caught} of {self.balls_total} balls"
