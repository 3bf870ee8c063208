"""Pages for accounts, teams, members and API tokens."""
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from . import services
from .access import team_view
from .forms import InviteForm, SignUpForm, TeamForm, TokenForm
from .models import ApiToken, Membership, Role


def signup(request):
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        if form.cleaned_data.get("team_name"):
            team = services.team_create(name=form.cleaned_data["team_name"], actor=user)
            return redirect("environments:list", team=team.slug)
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form})


@login_required
def home(request):
    slug = request.session.get("team")
    membership = Membership.objects.filter(user=request.user).select_related("team")
    chosen = membership.filter(team__slug=slug).first() or membership.first()
    if chosen is None:
        return redirect("team_new")
    return redirect("environments:list", team=chosen.team.slug)


@login_required
def team_new(request):
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            team = services.team_create(name=form.cleaned_data["name"], actor=request.user)
        except services.TeamError as exc:
            form.add_error("name", exc.message)
        else:
            messages.success(request, f"Team {team.name} created.")
            return redirect("environments:list", team=team.slug)
    return render(request, "studio/team_new.html", {"form": form})


@team_view("read")
def team_settings(request):
    members = Membership.objects.filter(team=request.team).select_related("user").order_by("user__username")
    tokens = ApiToken.objects.filter(team=request.team, user=request.user)
    return render(
        request,
        "studio/team_settings.html",
        {
            "members": members,
            "invite_form": InviteForm(),
            "token_form": TokenForm(),
            "tokens": tokens,
            "roles": Role.choices,
            "new_token": request.session.pop("new_token", None),
        },
    )


@require_POST
@team_view("manage")
def member_invite(request):
    form = InviteForm(request.POST)
    if form.is_valid():
        try:
            m = services.member_invite(
                team=request.team, username=form.cleaned_data["username"], role=form.cleaned_data["role"],
                actor=request.user,
            )
            messages.success(request, f"{m.user.username} joined as {m.role}.")
        except services.TeamError as exc:
            messages.error(request, exc.message)
    else:
        messages.error(request, "Give a username and a role.")
    return redirect("team_settings", team=request.team.slug)


@require_POST
@team_view("manage")
def member_role(request, membership_id):
    membership = get_object_or_404(Membership, pk=membership_id, team=request.team)
    try:
        services.member_set_role(membership=membership, role=request.POST.get("role", ""), actor=request.user)
        messages.success(request, f"{membership.user.username} is now {membership.role}.")
    except services.TeamError as exc:
        messages.error(request, exc.message)
    return redirect("team_settings", team=request.team.slug)


@require_POST
@team_view("manage")
def member_remove(request, membership_id):
    membership = get_object_or_404(Membership, pk=membership_id, team=request.team)
    try:
        services.member_remove(membership=membership, actor=request.user)
        messages.success(request, f"{membership.user.username} removed.")
    except services.TeamError as exc:
        messages.error(request, exc.message)
    return redirect("team_settings", team=request.team.slug)


@require_POST
@team_view("read")
def token_create(request):
    form = TokenForm(request.POST)
    name = form.data.get("name", "") if not form.is_valid() else form.cleaned_data["name"]
    token, raw = services.token_create(team=request.team, actor=request.user, name=name)
    # Shown once on the next page, then gone: only the hash is stored.
    request.session["new_token"] = {"name": token.name, "raw": raw}
    return redirect("team_settings", team=request.team.slug)


@require_POST
@team_view("read")
def token_revoke(request, token_id):
    token = get_object_or_404(ApiToken, pk=token_id, team=request.team, user=request.user)
    services.token_revoke(token=token, actor=request.user)
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("team_settings", team=request.team.slug)
