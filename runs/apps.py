from django.apps import AppConfig
from django.conf import settings


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs and rollouts"

    def ready(self):
        # Every team's screenshots live under MEDIA_ROOT: no sandbox may read them.
        from .sandbox.process import hide_paths

        hide_paths(settings.MEDIA_ROOT)
