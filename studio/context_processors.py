"""Template context every page needs: the user's teams for the switcher and the current team."""
from .models import Membership


def team(request):
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    memberships = list(Membership.objects.filter(user=request.user).select_related("team"))
    current = getattr(request, "team", None)
    return {
        "my_memberships": memberships,
        "current_team": current,
        "current_membership": getattr(request, "membership", None),
    }
