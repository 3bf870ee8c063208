"""REST endpoints for agents, runs, rollouts and steps."""
from ninja import Router

router = Router(tags=["runs"])
