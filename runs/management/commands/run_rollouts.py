"""Start a run from the command line: prints the run id; with --wait, a JSON summary when it is done."""
import json
import time
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from environments.selectors import version_by_label
from runs import figures, seeds, services
from runs.agents import VERSION_AGENT
from runs.models import AgentKind
from runs.tasks import execute_rollout
from studio.errors import DomainError
from studio.models import Membership, Role, Team


def parse_seeds(text: str) -> list[int]:
    """--seeds as runs.seeds reads it ('0-9', '1,2,5' or '0-4,10'), a bad value as a command error."""
    try:
        return seeds.parse_seeds(text)
    except ValueError as exc:
        raise CommandError(f"--seeds: {exc}") from None


class Command(BaseCommand):
    help = "Run an agent on ENV_SLUG@N for the chosen tasks and seeds; prints the run id (and a JSON summary with --wait)."

    def add_arguments(self, parser):
        parser.add_argument("version", help="ENV_SLUG@N (or ENV_SLUG for the latest version)")
        parser.add_argument("--team", required=True, help="team slug")
        parser.add_argument("--agent", required=True, help="'random', 'version' (the scripted agent the version ships:"
                                                                  " its [quality] oracle, else agent.py) or the path of a scripted agent .py file")
        parser.add_argument("--tasks", default="all", help="'all', task ids separated by commas, or curriculum[:STRATEGY]"
                                                             " (uniform, learnable, ladder: each rollout's task picked when dispatched)")
        parser.add_argument("--count", type=int, default=None, help="rollouts of a curriculum run")
        parser.add_argument("--seeds", default="0", help="seeds such as 0-9 or 1,2,5")
        parser.add_argument("--repeats", type=int, default=1)
        parser.add_argument("--wait", action="store_true", help="wait for the run to finish and print a JSON summary")
        parser.add_argument("--timeout", type=float, default=600.0, help="seconds --wait waits (default 600)")
        parser.add_argument("--inline", action="store_true", help="run the rollouts in this process instead of on workers (implies --wait)")
        parser.add_argument("--user", default="", help="acting username (default: the team's first owner)")

    def handle(self, *args, **options):
        team, actor, version = command_version(team_slug=options["team"], username=options["user"], label=options["version"])
        try:
            agent = self._agent(team, actor, version, options["agent"])
            text = options["tasks"].strip()
            tasks = text if text == "all" or text.startswith("curriculum") else [t.strip() for t in text.split(",") if t.strip()]
            run = services.run_create(
                team=team, actor=actor, version=version, agent=agent, task_ids=tasks,
                seeds=parse_seeds(options["seeds"]), repeats=options["repeats"], enqueue=not options["inline"],
                count=options["count"],
            )
        except DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(str(run.pk))
        if options["inline"]:
            for rollout_id in run.rollouts.order_by("id").values_list("id", flat=True):
                execute_rollout(rollout_id)
        if options["wait"] or options["inline"]:
            summary = self._wait(run, options["timeout"])
            self.stdout.write(json.dumps(summary, indent=2, sort_keys=True))
            if summary["pending"]:
                raise CommandError(
                    f"run {run.pk} not finished after {options['timeout']:g} s"
                    f" ({summary['done']}/{summary['total']} done, {summary['pending']} queued or running)"
                )

    def _agent(self, team, actor, version, spec: str):
        if spec in ("random", VERSION_AGENT):
            return services.agent_for_run(team=team, actor=actor, version=version, reference=spec)
        path = Path(spec)
        if not path.is_file():
            raise CommandError(f"--agent must be 'random', 'version' (the version's own agent) or an existing .py file, not {spec!r}")
        return services.agent_get_or_create(
            team=team, actor=actor, name=path.stem, kind=AgentKind.SCRIPTED, code=path.read_text(encoding="utf-8")
        )

    def _wait(self, run, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            run.refresh_from_db()
            summary = figures.run_figures(run)
            if not summary["pending"] or time.monotonic() > deadline:
                return summary
            time.sleep(0.5)


def command_version(*, team_slug: str, username: str, label: str):
    """(team, acting user, version) that a command names with --team, --user and SLUG@N; a command
    error saying which one is unknown."""
    team = Team.objects.filter(slug=team_slug).first()
    if team is None:
        raise CommandError(f"No team with slug {team_slug!r}.")
    actor = command_actor(team, username)
    try:
        version = version_by_label(team=team, label=label)
    except Http404 as exc:
        raise CommandError(f"No version {label!r} in team {team.slug}: {exc}") from None
    return team, actor, version


def command_actor(team, username):
    User = get_user_model()
    if username:
        user = User.objects.filter(username=username).first()
        if user is None or not Membership.objects.filter(team=team, user=user).exists():
            raise CommandError(f"{username!r} is not a member of {team.slug}.")
        return user
    membership = Membership.objects.filter(team=team, role=Role.OWNER).select_related("user").first()
    return membership.user if membership else None
