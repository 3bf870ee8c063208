"""Training-loop protocols: every environment version served over OpenEnv's wire protocol (HTTP and
WebSocket) and its tools over MCP, each episode a recorded rollout (a thin driver of runs/episodes)."""
