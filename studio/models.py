"""Teams, their members and roles, and the API tokens members use."""
import hashlib
import secrets

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    AUTHOR = "author", "Author"
    REVIEWER = "reviewer", "Reviewer"
    VIEWER = "viewer", "Viewer"


# What each role may do; checked by `Membership.can`.
ROLE_PERMISSIONS = {
    Role.OWNER: {"read", "author", "run", "review", "manage"},
    Role.AUTHOR: {"read", "author", "run"},
    Role.REVIEWER: {"read", "review"},
    Role.VIEWER: {"read"},
}


class Team(models.Model):
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=120)
    created_at = models.DateTimeField(auto_now_add=True)
    # The training gate (runs/quality/gate.py): a version whose latest audit is flagged is not served to
    # training (evaluation runs, remote episodes, exports) unless someone overrides it, saying why.
    training_gate = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_team")]
        ordering = ["team__name", "user__username"]

    def __str__(self):
        return f"{self.user} in {self.team} ({self.role})"

    def can(self, permission: str) -> bool:
        return permission in ROLE_PERMISSIONS[Role(self.role)]

    # For templates, which cannot pass arguments.
    can_author = property(lambda self: self.can("author"))
    can_run = property(lambda self: self.can("run"))
    can_review = property(lambda self: self.can("review"))
    can_manage = property(lambda self: self.can("manage"))


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class ApiToken(models.Model):
    """A bearer token for the API and websockets; only its SHA-256 is stored."""

    PREFIX = "es_"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=16, help_text="first characters, to recognise the token")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.name} ({self.hint}…)"

    @classmethod
    def generate_raw(cls) -> str:
        return cls.PREFIX + secrets.token_urlsafe(32)


class InstallSecret(models.Model):
    """This install's own random secret (studio/install_secret.py): seed secrets and the default
    model-key encryption key derive from it. One row, created at first start.

    Unmanaged, its table made by migration 0002: Django's flush (a transactional test's teardown, the
    `flush` command) empties only managed models' tables, so the secret outlives them, as it must, or
    every version's episodes and every stored model key would change with it."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    value = models.CharField(max_length=128)
    created_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "studio_install_secret"
