"""Export a run's trajectories: JSON lines on stdout (one rollout a line, streamed), or a file
(`--output PATH`; a .parquet path writes Parquet)."""
from django.core.management.base import BaseCommand, CommandError

from runs.interop import INSPECT_MISSING, inspect_installed
from runs.models import Run
from runs.review.export import EXPORT_DECISIONS, EXPORT_FORMATS, ExportFilter, InvalidExport, export_count, export_lines
from runs.review.export_chat import ARGUMENT_MODES
from runs.review.export_http import export_refusal
from runs.review.export_parquet import parquet_chunks


class Command(BaseCommand):
    help = ("Print the rollouts of a run as JSON lines (with --approved-only: those whose current label is approved "
            "or overridden; --format chat: chat messages with tool calls for fine-tuning; --output x.parquet: Parquet).")

    def add_arguments(self, parser):
        parser.add_argument("--run", type=int, required=True, help="run id")
        parser.add_argument("--team", default="", help="team slug (refuses a run of another team)")
        parser.add_argument("--approved-only", action="store_true", help="same as --decision approved")
        parser.add_argument("--decision", choices=EXPORT_DECISIONS, default=None,
                            help="the current label: approved (approved or overridden), overridden, rejected, "
                                 "proposed (not yet reviewed), or all (the default)")
        parser.add_argument("--min-reward", type=float, default=None,
                            help="lowest exported reward (the current label's value, else the verifier's)")
        parser.add_argument("--max-reward", type=float, default=None, help="highest exported reward")
        parser.add_argument("--format", choices=(*EXPORT_FORMATS, "inspect"), default="trajectory", dest="fmt",
                            help="trajectory, chat, atif (one ATIF trajectory a line, Harbor's format), "
                                 "or inspect (an Inspect AI .json log; needs --output)")
        parser.add_argument("--arguments", choices=ARGUMENT_MODES, default="object",
                            help="chat: tool-call arguments as JSON objects (default) or JSON strings")
        parser.add_argument("--output", default="", help="write to this file instead of stdout; .parquet writes Parquet")

    def handle(self, *args, run, team, approved_only, decision, min_reward, max_reward, fmt, arguments, output, **options):
        runs = Run.objects.all()
        if team:
            runs = runs.filter(team__slug=team)
        run_obj = runs.filter(pk=run).first()
        if run_obj is None:
            raise CommandError(f"No run {run}" + (f" in team {team}" if team else "") + ".")
        if approved_only and decision not in (None, "approved"):
            raise CommandError("--approved-only and --decision disagree; give one.")
        try:
            filters = ExportFilter(decision="approved" if approved_only else (decision or "all"),
                                   min_reward=min_reward, max_reward=max_reward)
        except InvalidExport as exc:
            raise CommandError(exc.message) from None
        rollouts = run_obj.rollouts.all()
        if refusal := export_refusal(rollouts):
            raise CommandError(refusal)
        count = export_count(rollouts, filters=filters)
        if count == 0:
            # Said on stderr: stdout stays a valid (empty) JSONL stream for pipes.
            self.stderr.write(f"0 rollouts of run {run_obj.pk} match ({filters.describe()}).")
        if fmt == "inspect":
            if not output:
                raise CommandError("--format inspect writes an Inspect log file: give --output PATH.json")
            if not inspect_installed():
                raise CommandError(INSPECT_MISSING[0].upper() + INSPECT_MISSING[1:] + ".")
            from runs.interop.inspect_log import inspect_log_bytes

            with open(output, "wb") as handle:
                handle.write(inspect_log_bytes(rollouts, filters=filters))
            self.stderr.write(f"Wrote {count} rollout{'s' if count != 1 else ''} to {output}.")
            return
        if fmt == "atif" and output.endswith(".parquet"):
            raise CommandError("ATIF trajectories are JSON documents, one a line: give a .jsonl path")
        lines = export_lines(rollouts, filters=filters, fmt=fmt, arguments=arguments)
        if output.endswith(".parquet"):
            with open(output, "wb") as handle:
                for chunk in parquet_chunks(lines, fmt=fmt, arguments=arguments):
                    handle.write(chunk)
        elif output:
            with open(output, "w", encoding="utf-8") as handle:
                handle.writelines(lines)
        else:
            write = self.stdout._out.write
            for line in lines:  # one JSON line at a time, no per-line styling
                write(line)
        if output:
            self.stderr.write(f"Wrote {count} rollout{'s' if count != 1 else ''} to {output}.")
