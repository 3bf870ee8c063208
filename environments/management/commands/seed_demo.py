"""Create the demo user and team, load the demo environment packages, their solving and gaming agents,
a finished run per environment and a few reviewed rollouts, so a first visit finds every page
populated (idempotent: what exists is left alone; `--no-runs` skips the runs)."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from environments import package, services
from environments.demo import demo_package_dirs, read_folder
from environments.dependencies import services as dependency_services
from environments.models import DependencyStatus, Environment, EnvironmentVersion
from runs.figures import run_figures
from studio.errors import DomainError
from studio.models import Membership, Role, Team

DEMO_USER, DEMO_PASSWORD, DEMO_TEAM = "demo", "demo-password", "demo"


class Command(BaseCommand):
    help = (
        "Create user demo/demo-password, team 'demo', one version of each demo environment, the demo"
        " agents, a finished run per environment and a few reviewed rollouts."
    )

    def add_arguments(self, parser):
        parser.add_argument("--no-runs", action="store_true", help="load environments and agents only")
        parser.add_argument(
            "--live-run", action="store_true",
            help="also queue a longer run for the workers (make run starts them next), to watch live",
        )

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
        if not options["no_runs"]:
            self._build_dependencies(team)
        agents = {folder.name: self._agents(team, user, folder) for folder in demo_package_dirs()}
        if not options["no_runs"]:
            for folder in demo_package_dirs():
                env = Environment.objects.get(team=team, slug=folder.name.replace("_", "-"))
                if agents[folder.name]:
                    self._finished_run(team, user, env, agents[folder.name][0])
        if options["live_run"]:
            self._live_run(team, user)
        self.stdout.write(self.style.SUCCESS(f"Demo ready: log in as {DEMO_USER} / {DEMO_PASSWORD}"))


    def _agents(self, team, user, folder) -> list:
        """The package's solving agent (agent.py) and gaming agent (agent_gaming.py), when it has them."""
        from runs import services as run_services

        made = []
        for filename, role in (("agent.py", "solver"), ("agent_gaming.py", "gamer")):
            path = folder / filename
            if path.exists():
                agent = run_services.agent_get_or_create(
                    team=team, actor=user, name=f"{folder.name.replace('_', '-')} {role}", kind="scripted",
                    code=path.read_text(encoding="utf-8"),
                )
                made.append(agent)
        return made

    def _finished_run(self, team, user, env, agent) -> None:
        """One run of the solver over every task (seeds 0-1), played here, with its first rollouts reviewed."""
        from runs import services as run_services
        from runs.review import services as review_services
        from runs.tasks import execute_rollout

        if env.versions.filter(runs__isnull=False).exists():
            return
        version = env.versions.order_by("-number").first()
        refusal = dependency_services.version_run_refusal(version)
        if refusal:
            self.stdout.write(f"no run of {version.label}: {refusal}")
            return
        run = run_services.run_create(team=team, actor=user, version=version, agent=agent, seeds=[0, 1], enqueue=False)
        for rollout_id in run.rollouts.order_by("id").values_list("id", flat=True):
            execute_rollout(rollout_id)
        reviewed = 0
        for rollout in run.rollouts.order_by("id"):
            if reviewed == 2:
                break
            try:
                review_services.label_decide(rollout=rollout, actor=user, decision="approved")
            except DomainError:
                # No reward to approve (the episode did not end normally): the environment's fault.
                review_services.label_decide(
                    rollout=rollout, actor=user, decision="rejected", rationale="no reward: the episode did not end normally"
                )
            reviewed += 1
        figures = run_figures(run)
        self.stdout.write(
            f"run {run.pk} of {version.label} by {agent.name}: {figures['done']}/{figures['total']} done,"
            f" {figures['succeeded']} succeeded, {reviewed} reviewed"
        )


    def _build_dependencies(self, team) -> None:
        """Build the dependency environments of the demo versions here (the queued build task then
        finds them built), so their runs can follow; a failed build is reported, not fatal."""
        for version in EnvironmentVersion.objects.filter(
            environment__team=team, dependency_environment__isnull=False
        ).exclude(dependency_environment__status=DependencyStatus.READY).select_related("environment"):
            outcome = dependency_services.dependency_environment_build(depenv_id=version.dependency_environment_id)
            version.dependency_environment.refresh_from_db()
            error = version.dependency_environment.error
            self.stdout.write(f"dependencies of {version.label}: {outcome}" + (f" ({error.splitlines()[0]})" if error else ""))

    def _live_run(self, team, user) -> None:
        """A random agent over guess-number's tasks and 40 seeds, queued for the workers; none is added
        while an earlier one is still queued or running."""
        from runs import services as run_services
        from runs.models import Run, RunStatus

        env = Environment.objects.filter(team=team, slug="guess-number").first()
        if env is None or Run.objects.filter(team=team, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).exists():
            return
        agent = run_services.agent_get_or_create(team=team, actor=user, name="random", kind="random")
        version = env.versions.order_by("-number").first()
        run = run_services.run_create(team=team, actor=user, version=version, agent=agent, seeds=list(range(40)))
        self.stdout.write(f"run {run.pk} of {version.label} by random queued: watch it at /t/{team.slug}/runs/{run.pk}/")


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
