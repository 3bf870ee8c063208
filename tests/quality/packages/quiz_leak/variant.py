"""The arithmetic quiz, leaking: its observation carries the hidden answer under an innocent key
(never do this). The probes do not read it; only the leak scan finds it."""

from env import Quiz


class LeakyQuiz(Quiz):
    def observation(self, task):
        return {**super().observation(task), "meta": {"check": str(self.expected)}}
