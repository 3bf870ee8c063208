"""Team scoping for pages: every team URL resolves the team through the user's membership."""
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404

from .models import Membership
from .services import token_authenticate


class InvalidToken(Exception):
    """A bearer token was given but is unknown, revoked or its user left the team."""


def reader_for(request):
    """(user, team) of whoever asks: a bearer token's user and its one team (programs), the session's
    user and None for any team of theirs (pages), or (None, None). A token that is given but not valid
    raises InvalidToken instead of falling back to the session, as on websockets (studio/ws_auth.py)."""
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and raw.strip():
        token = token_authenticate(raw.strip())
        if token is None:
            raise InvalidToken
        return token.user, token.team
    if request.user.is_authenticated:
        return request.user, None
    return None, None


def membership_for(user, team_slug: str) -> Membership:
    """The user's membership of the team, or 404: outsiders cannot tell a team exists."""
    if not user.is_authenticated:
        raise Http404
    membership = (
        Membership.objects.select_related("team").filter(user=user, team__slug=team_slug).first()
    )
    if membership is None:
        raise Http404("No such team")
    return membership


def team_view(permission: str = "read"):
    """Decorate a view taking `team` (a slug) in its URL: sets request.team and request.membership."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapped(request, team, *args, **kwargs):
            membership = membership_for(request.user, team)
            if not membership.can(permission):
                raise PermissionDenied(f"Your role ({membership.role}) cannot do this.")
            request.team = membership.team
            request.membership = membership
            request.session["team"] = membership.team.slug
            return view(request, *args, **kwargs)

        return wrapped

    return decorator
