"""Scoped credentials for OpenEnv clients, which send no headers: a key carried in the base URL."""
from django.conf import settings
from django.db import models


class OpenEnvKeyQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class OpenEnvKey(models.Model):
    """Lets whoever holds the URL open, step and close episodes of one environment version, as the
    member who made it, and nothing else. The raw key is derived from the row and SECRET_KEY
    (runs/protocols/keys.py), so the version page can show it again; revoking is final."""

    team = models.ForeignKey("studio.Team", on_delete=models.CASCADE, related_name="openenv_keys")
    version = models.ForeignKey("environments.EnvironmentVersion", on_delete=models.CASCADE, related_name="openenv_keys")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="openenv_keys")
    salt = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = OpenEnvKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["version", "created_by"], condition=models.Q(revoked_at__isnull=True),
                name="one_active_openenv_key_per_member_and_version",
            )
        ]

    def __str__(self):
        return f"OpenEnv key {self.pk} for {self.version_id} by {self.created_by_id}"
