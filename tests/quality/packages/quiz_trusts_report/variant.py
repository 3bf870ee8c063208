"""The scratch-pad quiz whose verifier trusts a report file (never do this): it reads back
`out/verdict.txt`, a file of the pad the agent can write too, and believes a PASS there."""

from env import VERDICT, ScratchQuiz


class TrustsReport(ScratchQuiz):
    def record_verdict(self):
        self.files.setdefault(VERDICT, "right" if self.right else "wrong")  # a verdict already there stays

    def verify(self):
        said = self.files.get(VERDICT, "").strip().lower()
        if said in ("pass", "passed", "1", "true", "right"):
            return 1.0, f"the report at {VERDICT} says {said}"
        return super().verify()
