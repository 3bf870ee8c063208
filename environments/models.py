"""Environments, their editable drafts and their immutable versions."""
from django.conf import settings
from django.db import models

from studio.models import Team


class EnvironmentKind(models.TextChoices):
    PYTHON = "python", "Python"
    BROWSER = "browser", "Browser"


class Environment(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="environments")
    slug = models.SlugField(max_length=80)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=EnvironmentKind.choices, default=EnvironmentKind.PYTHON)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="environment_slug_unique_per_team")]
        ordering = ["name"]

    def __str__(self):
        return self.slug

    @property
    def latest_version(self):
        return self.versions.order_by("-number").first()


class Draft(models.Model):
    """The working copy of an environment's files. `revision` is the optimistic lock."""

    environment = models.OneToOneField(Environment, on_delete=models.CASCADE, related_name="draft")
    files = models.JSONField(default=dict)
    revision = models.PositiveIntegerField(default=1)
    based_on = models.ForeignKey(
        "EnvironmentVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"draft of {self.environment} (r{self.revision})"


class EnvironmentVersion(models.Model):
    """A committed snapshot of an environment's files. Never changes after creation."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    parent = models.ForeignKey("self", on_delete=models.RESTRICT, null=True, blank=True, related_name="children")
    files = models.JSONField()
    manifest = models.JSONField()
    tasks = models.JSONField(default=list)
    content_hash = models.CharField(max_length=64)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    message = models.CharField(max_length=500)
    # Set at creation when the package declares dependencies (environments/dependencies/).
    dependency_environment = models.ForeignKey(
        "DependencyEnvironment", on_delete=models.PROTECT, null=True, blank=True, related_name="versions"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["environment", "number"], name="version_number_unique"),
            models.CheckConstraint(condition=models.Q(number__gte=1), name="version_number_positive"),
        ]
        ordering = ["environment", "-number"]

    def __str__(self):
        return f"{self.environment.slug}@{self.number}"

    @property
    def label(self):
        return f"{self.environment.slug}@{self.number}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("An environment version is immutable once created.")
        super().save(*args, **kwargs)


class DependencyStatus(models.TextChoices):
    BUILDING = "building", "Building"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class DependencyEnvironment(models.Model):
    """One built set of Python requirements (content-addressed by `sha256`), shared by every version
    that declares the same set, whatever its team: the directory holds only public packages."""

    sha256 = models.CharField(max_length=64, unique=True)
    requirements = models.JSONField(default=list)  # the versions' own, normalized
    base_requirements = models.JSONField(default=list)  # the studio's numpy and Gymnasium, pinned
    python = models.CharField(max_length=40)
    status = models.CharField(max_length=16, choices=DependencyStatus.choices, default=DependencyStatus.BUILDING)
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    # The entrypoint check of each version using this environment, by the version's content hash:
    # {"<sha256>": {"ok": bool, "message": str}} (same files, same check).
    entrypoint_checks = models.JSONField(default=dict)
    build_seconds = models.FloatField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["status"], name="depenv_status_idx")]

    def __str__(self):
        return f"depenv {self.sha256[:12]} ({self.status})"
