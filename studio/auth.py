"""Who is calling the API: bearer-token authentication and the role check every endpoint makes.

Apart from `studio.api` (which mounts every app's router) so the apps can import it without
importing the module that imports them.
"""
from ninja.errors import HttpError
from ninja.security import HttpBearer

from .models import Membership
from .services import token_authenticate


class TokenAuth(HttpBearer):
    def authenticate(self, request, token):
        api_token = token_authenticate(token)
        if api_token is None:
            return None
        request.team = api_token.team
        request.membership = Membership.objects.get(team=api_token.team, user=api_token.user)
        request.user = api_token.user
        return api_token


def require(request, permission: str) -> None:
    """Refuse with 403 when the token's member lacks the permission."""
    if not request.membership.can(permission):
        raise HttpError(403, f"Your role ({request.membership.role}) cannot do this.")
