"""Review of rollouts: reward-label decisions, annotations, the review queue, agreement figures, export."""
