"""Export a run's trajectories as JSONL on stdout: one rollout a line, its steps inside, streamed."""
import json

from django.core.management.base import BaseCommand, CommandError

from runs import selectors
from runs.models import LabelDecision, Run, Step

STEP_FIELDS = ("index", "action", "observation", "reward", "terminated", "truncated", "info")
APPROVED_DECISIONS = (LabelDecision.APPROVED, LabelDecision.OVERRIDDEN)


class Command(BaseCommand):
    help = "Print the rollouts of a run as JSON lines (with --approved-only: those whose current label is approved or overridden)."

    def add_arguments(self, parser):
        parser.add_argument("--run", type=int, required=True, help="run id")
        parser.add_argument("--team", default="", help="team slug (refuses a run of another team)")
        parser.add_argument("--approved-only", action="store_true")

    def handle(self, *args, run, team, approved_only, **options):
        runs = Run.objects.select_related("environment_version__environment", "agent")
        if team:
            runs = runs.filter(team__slug=team)
        run_obj = runs.filter(pk=run).first()
        if run_obj is None:
            raise CommandError(f"No run {run}" + (f" in team {team}" if team else "") + ".")
        version = run_obj.environment_version
        rollouts = selectors.with_current_label(run_obj.rollouts.order_by("id"))
        if approved_only:
            rollouts = rollouts.filter(current_label_decision__in=APPROVED_DECISIONS)
        head = {
            "environment": version.environment.slug,
            "version": version.label,
            "content_hash": version.content_hash,
            "agent": {"name": run_obj.agent.name, "kind": run_obj.agent.kind, "code_hash": run_obj.agent.code_hash},
        }
        write = self.stdout._out.write  # one JSON line at a time, no per-line styling
        for rollout in rollouts.iterator(chunk_size=200):
            steps = Step.objects.filter(rollout_id=rollout.pk).order_by("index").values_list(*STEP_FIELDS)
            line = head | {
                "rollout_id": rollout.pk,
                "run_id": run_obj.pk,
                "task_id": rollout.task_id,
                "seed": rollout.seed,
                "repeat": rollout.repeat,
                "status": rollout.status,
                "end_reason": rollout.end_reason,
                "total_reward": rollout.total_reward,
                "verifier_reward": rollout.verifier_reward,
                "verifier_reason": rollout.verifier_reason,
                "label": None if rollout.current_label_decision is None else {
                    "value": rollout.current_label_value,
                    "decision": rollout.current_label_decision,
                    "source": rollout.current_label_source,
                },
                "initial_observation": rollout.initial_observation,
                "steps": [dict(zip(STEP_FIELDS, row)) for row in steps.iterator(chunk_size=2000)],
            }
            write(json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n")
