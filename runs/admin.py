from django.contrib import admin

from .models import Agent, Annotation, RewardLabel, Rollout, Run, Step


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("name", "team", "kind", "created_at")
    list_filter = ("kind",)


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "team", "environment_version", "agent", "status", "created_at")
    list_filter = ("status",)


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "task_id", "seed", "status", "total_reward", "verifier_reward", "step_count")
    list_filter = ("status",)


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ("rollout", "index", "reward", "terminated", "truncated", "elapsed_ms")


@admin.register(RewardLabel)
class RewardLabelAdmin(admin.ModelAdmin):
    list_display = ("rollout", "source", "decision", "value", "reviewer", "created_at")

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Annotation)
class AnnotationAdmin(admin.ModelAdmin):
    list_display = ("rollout", "step", "author", "tags", "created_at")
