"""Create the demo user and team and load the demo environment packages (idempotent)."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from environments import package, services
from environments.demo import demo_package_dirs, read_folder
from environments.models import Environment
from studio.models import Membership, Role, Team

DEMO_USER, DEMO_PASSWORD, DEMO_TEAM = "demo", "demo-password", "demo"


class Command(BaseCommand):
    help = "Create user demo/demo-password, team 'demo', and one version of each demo environment."

    def handle(self, **options):
        User = get_user_model()
        with transaction.atomic():
            user, created = User.objects.get_or_create(username=DEMO_USER, defaults={"email": "demo@example.com"})
            if created:
                user.set_password(DEMO_PASSWORD)
                user.save()
            team, _ = Team.objects.get_or_create(slug=DEMO_TEAM, defaults={"name": "Demo team"})
            Membership.objects.get_or_create(team=team, user=user, defaults={"role": Role.OWNER})
        for folder in demo_package_dirs():
            files = read_folder(folder)
            manifest = package.parse_manifest(files)
            env = Environment.objects.filter(team=team, slug=folder.name.replace("_", "-")).first()
            if env is not None and not env.description:
                services.environment_update(environment=env, actor=user, description=_description(files))
            if env is None:
                env = services.environment_create(
                    team=team, actor=user, name=manifest["name"], slug=folder.name.replace("_", "-"),
                    kind=manifest["kind"], description=_description(files), files=files,
                )
            latest = env.versions.order_by("-number").first()
            if latest and latest.content_hash == package.content_hash(files):
                self.stdout.write(f"{latest.label} is up to date")
                continue
            version = services.version_commit(environment=env, actor=user, message="Demo package", files=files)
            self.stdout.write(f"loaded {version.label}")
        self.stdout.write(self.style.SUCCESS(f"Demo ready: log in as {DEMO_USER} / {DEMO_PASSWORD}"))


def _description(files):
    """The README's first paragraph line, else env.py's docstring."""
    for line in files.get("README.md", "").splitlines():
        if line.strip() and not line.startswith("#"):
            return line.strip()[:300]
    import ast

    try:
        return (ast.get_docstring(ast.parse(files.get("env.py", ""))) or "").split("\n")[0][:300]
    except SyntaxError:
        return ""
