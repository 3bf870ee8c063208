"""Environment versions inside other evaluation and training stacks (Inspect AI, verifiers); each
episode they play is a studio session, so it is recorded as a rollout like any other."""
