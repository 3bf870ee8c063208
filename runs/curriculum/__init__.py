"""Curriculum: per-agent task statistics kept as rollouts finish, samplers that pick the tasks worth
practising, and each run's signal figure (docs/curriculum.md)."""
