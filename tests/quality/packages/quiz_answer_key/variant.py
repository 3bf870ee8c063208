"""The arithmetic quiz with one answer an episode, accepting an answer that is on the quiz's answer
key, whichever question it answers (never do this). Found by the `cross` answer probe (another task's
oracle answer)."""

from env import Quiz, parse_answer

ANSWER_KEY = {87, 391}  # the answers of tasks.jsonl


class AnswerKeyQuiz(Quiz):
    def observation(self, task):
        return {"question": f"What is {task['a']} {task['op']} {task['b']}?", "tries_left": 1}

    def step(self, action):
        self.tries += 1
        self.right = parse_answer(action) in ANSWER_KEY  # the flaw: the key, not this question's answer
        return {"verdict": "right" if self.right else "wrong"}, 1.0 if self.right else 0.0, True, False, {}
