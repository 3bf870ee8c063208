"""State changes for teams, memberships and API tokens."""
import functools

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from .errors import DomainError
from .slugs import slug_from
from .models import ApiToken, Membership, Role, Team, hash_token
from .revocation import CLOSE_NOT_A_MEMBER, CLOSE_REVOKED, member_tag, revocation_publish, token_tag


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
    team_id, user_id = membership.team_id, membership.user_id
    membership.delete()
    revocation_publish(tags=[member_tag(team_id=team_id, user_id=user_id)], code=CLOSE_NOT_A_MEMBER,
                       reason="You were removed from the team.")


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
    revocation_publish(tags=[token_tag(token.pk)], code=CLOSE_REVOKED, reason="The API token was revoked.")


def _columns(model, alias: str) -> tuple[list[str], str]:
    """A model's concrete fields (attribute names) and their SELECT list under a table alias."""
    fields = model._meta.concrete_fields
    return [f.attname for f in fields], ", ".join(f'{alias}."{f.column}"' for f in fields)


@functools.cache
def _token_sql() -> tuple[str, list]:
    user_model = get_user_model()
    parts = [(ApiToken, "t"), (user_model, "u"), (Team, "m")]
    columns = [_columns(model, alias) for model, alias in parts]
    sql = (
        f"SELECT {', '.join(select for _, select in columns)} FROM {ApiToken._meta.db_table} t"
        f" JOIN {user_model._meta.db_table} u ON u.id = t.user_id JOIN {Team._meta.db_table} m ON m.id = t.team_id"
        " WHERE t.token_hash = %s AND t.revoked_at IS NULL AND u.is_active"
        f" AND EXISTS (SELECT 1 FROM {Membership._meta.db_table} s WHERE s.team_id = t.team_id AND s.user_id = t.user_id)"
    )
    return sql, [(model, names) for (model, _), (names, _) in zip(parts, columns)]


def token_authenticate(raw: str) -> ApiToken | None:
    """The active token for this raw value, with its team and user, or None. A token outlives nothing:
    it stops working when its user leaves the team or is deactivated.

    One hand-written query: every API call and websocket handshake of a program comes through here, and
    the ORM's compilation of the same query (select_related plus the membership check) cost 2.3 ms of
    CPU per call against 0.3 ms (bench/bench_viewers.py: 200 viewers joining at once)."""
    if not raw or not raw.startswith(ApiToken.PREFIX):
        return None
    sql, parts = _token_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, [hash_token(raw)])
        row = cursor.fetchone()
    if row is None:
        return None
    objects, start = [], 0
    for model, names in parts:
        objects.append(model.from_db(connection.alias, names, row[start: start + len(names)]))
        start += len(names)
    token, token.user, token.team = objects
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def team_training_gate_set(*, team: Team, enabled: bool) -> Team:
    """Turn the team's training gate on or off (runs/quality/gate.py says what it blocks)."""
    team.training_gate = bool(enabled)
    team.save(update_fields=["training_gate"])
    return team
