"""Remote sessions: a training loop outside the studio drives an environment step by step over the API.

The sandbox lives in the API process (services.py keeps a registry of open sessions); every session
is recorded as a rollout of the team's `remote` agent, so it streams and is reviewed like any other.
"""
