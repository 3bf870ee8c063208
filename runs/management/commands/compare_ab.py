"""A/B from the command line: two runs, two versions of one agent, or two agents, paired by instance
first (the compare page's and `GET /quality/compare`'s figures: runs.quality.selectors.ab_compare)."""
import json

from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from runs.quality.selectors import ab_compare
from studio.errors import DomainError
from studio.models import Team


def reward_text(value) -> str:
    return "—" if value is None else f"{value:.3f}"


class Command(BaseCommand):
    help = "Compare two runs (--runs 12,15), or versions A and B (--a slug@1 --b slug@2 --agent NAME [--agent-b NAME])."

    def add_arguments(self, parser):
        parser.add_argument("--team", required=True, help="team slug")
        parser.add_argument("--runs", default="", help="two run numbers, such as 12,15")
        parser.add_argument("--a", default="", help="version A as SLUG@N")
        parser.add_argument("--b", default="", help="version B as SLUG@N (default: A, when --agent-b is given)")
        parser.add_argument("--agent", default="", help="the agent (of A, and of B unless --agent-b)")
        parser.add_argument("--agent-b", default="", help="B's agent, to compare two agents")
        parser.add_argument("--json", action="store_true", help="print the comparison as one JSON object")

    def handle(self, *args, **options):
        team = Team.objects.filter(slug=options["team"]).first()
        if team is None:
            raise CommandError(f"No team with slug {options['team']!r}.")
        try:
            comparison = ab_compare(team=team, a=options["a"], b=options["b"], agent=options["agent"],
                                    agent_b=options["agent_b"], runs=options["runs"])
        except DomainError as exc:
            raise CommandError(f"{exc.field}: {exc.message}" if exc.field else exc.message) from None
        except Http404 as exc:
            raise CommandError(str(exc) or "Not found in this team.") from None
        if options["json"]:
            self.stdout.write(json.dumps(comparison, indent=2, sort_keys=True))
            return
        paired, unpaired = comparison["paired"], comparison["result"]
        self.stdout.write(f"A: {comparison['a_label']}\nB: {comparison['b_label']}")
        self.stdout.write(f"paired: {paired['pairs']} instances")
        if paired["note"]:
            self.stdout.write(f"  {paired['note']}")
        if paired["pairs"]:
            interval = f" [{reward_text(paired['ci95'][0])}, {reward_text(paired['ci95'][1])}]" if paired["ci95"] else ""
            self.stdout.write(f"  B - A {reward_text(paired['mean_difference'])}{interval}")
            test = paired["mcnemar"]
            self.stdout.write(f"  flips: A only {paired['a_only']}, B only {paired['b_only']}; McNemar "
                              + ("none (no instance flips)" if test["p_value"] is None else f"p = {test['p_value']:.4f} ({test['test']})"))
            for flip in paired["flips"]:
                self.stdout.write(f"    {flip['task_id']} seed {flip['seed']}: A {'pass' if flip['a']['passed'] else 'fail'}"
                                  f" (rollout {flip['a']['rollout']}), B {'pass' if flip['b']['passed'] else 'fail'} (rollout {flip['b']['rollout']})")
        self.stdout.write(f"unpaired: B - A {reward_text(unpaired['mean_difference'])}, p = "
                          f"{'—' if unpaired['p_value'] is None else format(unpaired['p_value'], '.4f')} (permutation)")
