"""Who may reach a version over the protocols: a key in the base URL (OpenEnv's client sends no
headers) or a team API token (`Authorization: Bearer`). Both end in one `Access`."""
import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass, replace

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils import timezone

from environments.selectors import version_by_label
from runs.curriculum.sampler import STRATEGIES
from runs.episodes.interactive import checked_agent_name
from studio.errors import DomainError
from studio.models import Membership
from studio.revocation import CLOSE_REVOKED, ensure_listening, member_tag, openenv_key_tag, revocation_cache, revocation_publish, token_tag
from studio.services import token_authenticate

from .models import OpenEnvKey

KEY_PREFIX = "oek"
KEY_FORM = re.compile(r"^oek(?P<pk>[0-9]{1,18})\.(?P<mac>[A-Za-z0-9_-]{32})$")
ACCESS_CACHE_S = 5.0


class AccessRefused(DomainError):
    status = 401


@dataclass(frozen=True)
class Access:
    """A resolved credential: the member acting, their team, and the one version they may drive; with
    what the base URL's query asks of its episodes (`?agent=NAME&curriculum=STRATEGY`), if anything."""

    team: object
    user: object
    membership: object
    version: object
    agent_name: str
    # The credentials it stands on (studio/revocation.py): revoking any of them ends what it holds open.
    tags: tuple = ()
    url_agent: str | None = None
    url_curriculum: str | None = None


def key_raw(key: OpenEnvKey) -> str:
    mac = hmac.new(settings.SECRET_KEY.encode(), f"openenv-key:{key.pk}:{key.salt}".encode(), hashlib.sha256).digest()
    return f"{KEY_PREFIX}{key.pk}.{base64.urlsafe_b64encode(mac).decode()[:32]}"


def openenv_key_get_or_create(*, team, actor, version) -> OpenEnvKey:
    """The member's active key for this version (one per member and version), made on first use."""
    if version.environment.team_id != team.pk:
        raise DomainError("That environment version belongs to another team.", field="version")
    key = OpenEnvKey.objects.active().filter(version=version, created_by=actor).first()
    if key is not None:
        return key
    try:
        with transaction.atomic():
            return OpenEnvKey.objects.create(team=team, version=version, created_by=actor, salt=secrets.token_hex(16))
    except IntegrityError:  # a concurrent first use made it
        return OpenEnvKey.objects.active().get(version=version, created_by=actor)


def openenv_key_revoke(*, team, actor, version) -> int:
    """Revoke the member's key for this version: its URL stops working and the connections it holds
    close (studio/revocation.py), in every process at once."""
    with transaction.atomic():
        keys = list(OpenEnvKey.objects.active().select_for_update().filter(team=team, version=version, created_by=actor)
                    .values_list("pk", flat=True))
        OpenEnvKey.objects.filter(pk__in=keys).update(revoked_at=timezone.now())
        if keys:
            revocation_publish(tags=[openenv_key_tag(pk) for pk in keys], code=CLOSE_REVOKED,
                               reason="The OpenEnv key was revoked.")
    return len(keys)


def openenv_base_path(*, version, key: OpenEnvKey | None = None) -> str:
    team_slug = version.environment.team.slug
    path = f"/openenv/{team_slug}/{version.label}"
    return f"{path}/k/{key_raw(key)}" if key is not None else path


_cache: dict[str, tuple[float, Access]] = {}
_cache_lock = threading.Lock()


def _cache_clear() -> None:
    with _cache_lock:
        _cache.clear()


revocation_cache(_cache_clear)


def access_resolve(*, team_slug: str, label: str, key: str | None, bearer: str | None, agent: str | None = None,
                   curriculum: str | None = None) -> Access:
    """The Access of a key (in the path) or a bearer token for `team_slug`/`label`; AccessRefused
    (401, 403 or 404) naming what is wrong otherwise. `agent` and `curriculum` are the base URL's query
    (checked: a DomainError naming the parameter). Remembered for ACCESS_CACHE_S."""
    credential = key if key is not None else (bearer or "")
    cache_key = hashlib.sha256(f"{credential}\0{team_slug}\0{label}\0{agent}\0{curriculum}".encode()).hexdigest()
    ensure_listening()  # a revocation in another process empties this cache
    hit = _cache.get(cache_key)
    if hit is not None and hit[0] > time.monotonic():
        return hit[1]
    access = _key_access(key, team_slug, label) if key is not None else _token_access(bearer, team_slug, label)
    if curriculum is not None and curriculum not in STRATEGIES:
        raise DomainError(f"curriculum must be one of {', '.join(STRATEGIES)}, not {curriculum!r}", field="curriculum")
    access = replace(access, url_agent=None if agent is None else checked_agent_name(team=access.team, name=agent, default=""),
                     url_curriculum=curriculum)
    with _cache_lock:
        if len(_cache) > 10_000:
            _cache.clear()
        _cache[cache_key] = (time.monotonic() + ACCESS_CACHE_S, access)
    return access


def _refuse(status: int, message: str) -> AccessRefused:
    refused = AccessRefused(message)
    refused.status = status
    return refused


def _key_access(raw: str, team_slug: str, label: str) -> Access:
    match = KEY_FORM.match(raw)
    key = None
    if match is not None:
        key = (OpenEnvKey.objects.active().select_related("team", "version__environment__team", "created_by")
               .filter(pk=int(match["pk"])).first())
    if key is None or not hmac.compare_digest(key_raw(key), raw):
        raise _refuse(401, "This OpenEnv key is not valid (revoked, or never issued). Get a new base URL from the version page.")
    if key.team.slug != team_slug or key.version.label != label:
        raise _refuse(403, f"This key is for {key.team.slug}/{key.version.label}, not {team_slug}/{label}.")
    return _member_access(team=key.team, user=key.created_by, version=key.version, agent_name="openenv",
                          credential=openenv_key_tag(key.pk))


def _token_access(raw: str | None, team_slug: str, label: str) -> Access:
    token = token_authenticate(raw or "")
    if token is None:
        raise _refuse(401, "Missing or invalid credential: use the base URL with its key, or send `Authorization: Bearer <token>`.")
    if token.team.slug != team_slug:
        raise _refuse(403, f"This token belongs to another team than {team_slug!r}.")
    try:
        version = version_by_label(team=token.team, label=label)
    except Http404:
        raise _refuse(404, f"No environment version {label} in team {team_slug}.") from None
    return _member_access(team=token.team, user=token.user, version=version, agent_name="openenv",
                          credential=token_tag(token.pk))


def _member_access(*, team, user, version, agent_name: str, credential: str) -> Access:
    membership = Membership.objects.filter(team=team, user=user, user__is_active=True).first()
    if membership is None:
        raise _refuse(403, "The member this credential acts for is no longer in the team.")
    if not membership.can("run"):
        raise _refuse(403, f"The member's role ({membership.role}) cannot run episodes.")
    return Access(team=team, user=user, membership=membership, version=version, agent_name=agent_name,
                  tags=(credential, member_tag(team_id=team.pk, user_id=user.pk)))
