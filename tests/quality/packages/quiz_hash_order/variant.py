"""The arithmetic quiz, showing topics in the iteration order of a set of strings (never do this: str
hashes are salted per process unless PYTHONHASHSEED is set, so the order changes from host to host).
The same under the studio's fixed hash seed, so its determinism pairs repeat; only portability sees it."""

from env import Quiz

TOPICS = {"carry", "digits", "order", "sign", "tens", "units", "check", "place"}


class HashOrderQuiz(Quiz):
    def observation(self, task):
        return {**super().observation(task), "topics": list(TOPICS)}
