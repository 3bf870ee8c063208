"""Push an environment package (folder, zip or tar.gz) as a new version: prints slug@N."""
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from environments import package, services
from environments.demo import read_folder
from studio.models import Membership, Role, Team


class Command(BaseCommand):
    help = "Create a new environment version from a package folder or archive; prints slug@N."

    def add_arguments(self, parser):
        parser.add_argument("path")
        parser.add_argument("--team", required=True, help="team slug")
        parser.add_argument("--message", "-m", default="", help="version message")
        parser.add_argument("--user", default="", help="author username (default: the team's first owner)")

    def handle(self, path, team, message, user, **options):
        team_obj = Team.objects.filter(slug=team).first()
        if team_obj is None:
            raise CommandError(f"No team with slug {team!r}.")
        actor = _actor(team_obj, user)
        p = Path(path)
        if not p.exists():
            raise CommandError(f"{path} does not exist.")
        try:
            if p.is_dir():
                files = read_folder(p)
                data = package.build_zip(files, p.name)
                filename = p.name + ".zip"
            else:
                data, filename = p.read_bytes(), p.name
            version = services.package_import(
                team=team_obj, actor=actor, data=data, filename=filename, message=message or f"Pushed {p.name}"
            )
        except package.InvalidPackage as exc:
            raise CommandError(str(exc)) from None
        except services.InvalidVersion as exc:
            raise CommandError("package refused:\n  " + "\n  ".join(str(x) for x in exc.problems)) from None
        except services.DomainError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(version.label)


def _actor(team, username):
    User = get_user_model()
    if username:
        u = User.objects.filter(username=username).first()
        if u is None or not Membership.objects.filter(team=team, user=u).exists():
            raise CommandError(f"{username!r} is not a member of {team.slug}.")
        return u
    m = Membership.objects.filter(team=team, role=Role.OWNER).select_related("user").first()
    return m.user if m else None
