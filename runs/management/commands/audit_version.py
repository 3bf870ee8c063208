"""Audit a version from the command line: queue its runs, wait for the report and print it."""
import json
import time

from django.core.management.base import BaseCommand, CommandError

from runs.management.commands.run_rollouts import command_version, parse_seeds
from runs.quality import services
from runs.quality.models import Audit
from runs.quality.selectors import audit_card
from runs.tasks import execute_rollout
from studio.errors import DomainError


class Command(BaseCommand):
    help = "Audit SLUG@N (hack probes, oracle, determinism, difficulty); waits and prints the report (JSON with --json)."

    def add_arguments(self, parser):
        parser.add_argument("version", help="SLUG@N (or SLUG for the latest version)")
        parser.add_argument("--team", required=True, help="team slug")
        parser.add_argument("--seeds", default="0-4", help="seeds such as 0-4 (default) or 1,2,5")
        parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
        parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the workers (default 900)")
        parser.add_argument("--inline", action="store_true", help="run the rollouts in this process instead of on workers")
        parser.add_argument("--user", default="", help="acting username (default: the team's first owner)")

    def handle(self, *args, **options):
        _team, actor, version = command_version(team_slug=options["team"], username=options["user"], label=options["version"])
        try:
            audit = services.audit_start(version=version, actor=actor, seeds=parse_seeds(options["seeds"]))
        except DomainError as exc:
            raise CommandError(exc.message) from None
        if options["inline"]:
            for entry in audit.audit_runs.order_by("id"):
                for rollout_id in entry.run.rollouts.order_by("id").values_list("id", flat=True):
                    execute_rollout(rollout_id)
            services.audit_complete(audit_id=audit.pk)
        audit = self._wait(audit, options["timeout"])
        if not audit.is_over:
            services.audit_cancel(audit=audit, actor=actor)
            raise CommandError(f"audit {audit.pk} of {version.label} did not end within {options['timeout']:g} s; cancelled it")
        if audit.report is None:
            raise CommandError(f"audit {audit.pk} of {version.label} ended {audit.status}: {audit.message}")
        if options["json"]:
            self.stdout.write(json.dumps(audit.report, indent=2, sort_keys=True))
            return
        card = audit_card(audit)
        self.stdout.write(f"{version.label}: {audit.report['status']} (audit {audit.pk})")
        for line in card["lines"]:
            link = f"  [rollout {line['rollout']}]" if line["rollout"] else ""
            self.stdout.write(f"  {line['level']:5}  {line['text']}{link}")
        for sentence in card["since_parent"]:
            self.stdout.write(f"  since the parent: {sentence}")

    def _wait(self, audit, timeout: float) -> Audit:
        deadline = time.monotonic() + timeout
        while True:
            audit.refresh_from_db()
            if audit.is_over or time.monotonic() > deadline:
                return audit
            time.sleep(0.5)
