from django.db import models

from environments.models import EnvironmentVersion
from studio.models import Team


class TaskStat(models.Model):
    """What one agent's done rollouts of evaluations and sessions of one task of a version add up to.
    Kept as rollouts finish (runs.curriculum.stats.count_finished), never recomputed from all rows."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    environment_version = models.ForeignKey(EnvironmentVersion, on_delete=models.CASCADE, related_name="+")
    task_id = models.CharField(max_length=200)
    agent_name = models.CharField(max_length=120)
    rollouts = models.PositiveIntegerField(default=0)
    successes = models.PositiveIntegerField(default=0)
    return_sum = models.FloatField(default=0.0)
    steps_sum = models.BigIntegerField(default=0)
    seconds_sum = models.FloatField(default=0.0)
    # The same counts with forgetting (runs.curriculum.stats.RECENT_DECAY): each new rollout of the task
    # weighs 1 and every earlier one DECAY times what it weighed, so they add up to at most RECENT_WINDOW.
    recent_rollouts = models.FloatField(default=0.0)
    recent_successes = models.FloatField(default=0.0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["environment_version", "agent_name", "task_id"], name="one_task_stat")]
