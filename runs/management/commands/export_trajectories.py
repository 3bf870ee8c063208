"""Export a run's trajectories as JSONL on stdout: one rollout a line, its steps inside, streamed."""
from django.core.management.base import BaseCommand, CommandError

from runs.models import Run
from runs.review.export import EXPORT_DECISIONS, EXPORT_FORMATS, export_lines


class Command(BaseCommand):
    help = ("Print the rollouts of a run as JSON lines (with --approved-only: those whose current label is approved "
            "or overridden; --format chat: chat messages with tool calls for fine-tuning).")

    def add_arguments(self, parser):
        parser.add_argument("--run", type=int, required=True, help="run id")
        parser.add_argument("--team", default="", help="team slug (refuses a run of another team)")
        parser.add_argument("--approved-only", action="store_true", help="same as --decision approved")
        parser.add_argument("--decision", choices=EXPORT_DECISIONS, default=None,
                            help="approved (approved or overridden), overridden, or all (the default)")
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="trajectory", dest="fmt")

    def handle(self, *args, run, team, approved_only, decision, fmt, **options):
        runs = Run.objects.all()
        if team:
            runs = runs.filter(team__slug=team)
        run_obj = runs.filter(pk=run).first()
        if run_obj is None:
            raise CommandError(f"No run {run}" + (f" in team {team}" if team else "") + ".")
        if approved_only and decision not in (None, "approved"):
            raise CommandError("--approved-only and --decision disagree; give one.")
        decision = "approved" if approved_only else (decision or "all")
        write = self.stdout._out.write  # one JSON line at a time, no per-line styling
        for line in export_lines(run_obj.rollouts.all(), decision=decision, fmt=fmt):
            write(line)
