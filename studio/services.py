"""State changes for teams, memberships and API tokens."""
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from .errors import DomainError
from .slugs import slug_from
from .models import ApiToken, Membership, Role, Team, hash_token


class TeamError(DomainError):
    """A team operation that cannot be done; the message is shown to the user."""


def team_create(*, name: str, actor) -> Team:
    name = name.strip()
    if not name:
        raise TeamError("A team needs a name.")
    base = slug_from(name, fallback="team", max_length=50)
    slug, n = base, 1
    while Team.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    with transaction.atomic():
        team = Team.objects.create(name=name, slug=slug)
        Membership.objects.create(team=team, user=actor, role=Role.OWNER)
    return team


def member_invite(*, team: Team, username: str, role: str, actor) -> Membership:
    if role not in Role.values:
        raise TeamError(f"Unknown role {role!r}; choose one of {', '.join(Role.values)}.")
    user = get_user_model().objects.filter(username=username.strip()).first()
    if user is None:
        raise TeamError(f"No user named {username!r}. They need to sign up first.")
    try:
        with transaction.atomic():
            return Membership.objects.create(team=team, user=user, role=role)
    except IntegrityError:
        raise TeamError(f"{username} is already a member of {team.name}.") from None


def member_set_role(*, membership: Membership, role: str, actor) -> Membership:
    if role not in Role.values:
        raise TeamError(f"Unknown role {role!r}.")
    if membership.role == Role.OWNER and role != Role.OWNER:
        owners = Membership.objects.filter(team=membership.team, role=Role.OWNER).count()
        if owners <= 1:
            raise TeamError("A team needs at least one owner.")
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


def member_remove(*, membership: Membership, actor) -> None:
    if membership.role == Role.OWNER:
        owners = Membership.objects.filter(team=membership.team, role=Role.OWNER).count()
        if owners <= 1:
            raise TeamError("The last owner cannot leave the team.")
    membership.delete()


def token_create(*, team: Team, actor, name: str) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the raw token, which is never stored or shown again."""
    name = name.strip() or "token"
    raw = ApiToken.generate_raw()
    token = ApiToken.objects.create(
        team=team, user=actor, name=name[:100], token_hash=hash_token(raw), hint=raw[:10]
    )
    return token, raw


def token_revoke(*, token: ApiToken, actor) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def token_authenticate(raw: str) -> ApiToken | None:
    """The active token for this raw value, with its team and user, or None."""
    if not raw or not raw.startswith(ApiToken.PREFIX):
        return None
    token = (
        ApiToken.objects.active()
        .select_related("team", "user")
        .filter(token_hash=hash_token(raw), user__is_active=True)
        .first()
    )
    if token is None:
        return None
    # A token outlives nothing: it stops working when its user leaves the team.
    if not Membership.objects.filter(team=token.team, user=token.user).exists():
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
