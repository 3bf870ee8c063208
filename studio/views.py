"""Pages for accounts, teams, members and API tokens, and the installable Python client's files."""
import functools
import hashlib

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseNotFound
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from studio_client import distribution

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
            "client_install_url": request.build_absolute_uri(reverse("client_python")),
        },
    )


@require_POST
@team_view("manage")
def training_gate(request):
    enabled = request.POST.get("enabled") == "on"
    services.team_training_gate_set(team=request.team, enabled=enabled)
    messages.success(request, "Training gate on: versions whose latest audit is flagged are not served to training until"
                              " someone overrides it." if enabled else "Training gate off: flagged versions are served to training.")
    return redirect("team_settings", team=request.team.slug)


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


# The client is built from this checkout's studio_client once per process: its sources do not change
# while the studio runs, and the build is deterministic (the same bytes in every process).
client_sdist = functools.cache(distribution.sdist_bytes)
client_wheel = functools.cache(distribution.wheel_bytes)


def client_file_response(name: str, data: bytes, content_type: str) -> HttpResponse:
    response = HttpResponse(data, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_safe
def client_python(request):
    """The client's sdist: `pip install <studio URL>/client/python` unpacks it and builds it with the
    backend inside it (standard library only, nothing fetched). pip takes a URL whose name is not a
    wheel's for a source archive, so this address serves one; the wheel has its own address."""
    name, data = client_sdist()
    return client_file_response(name, data, "application/x-gzip")


@require_safe
def client_python_files(request):
    """The client's files as links (pip's --find-links page), each with its sha256."""
    links = []
    for name, data in (client_wheel(), client_sdist()):
        url = reverse("client_python_file", args=[name])
        links.append(f'<a href="{url}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a><br>')
    return HttpResponse("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")


@require_safe
def client_python_file(request, filename):
    for name, data, content_type in (
        (*client_wheel(), "application/zip"), (*client_sdist(), "application/x-gzip"),
    ):
        if filename == name:
            return client_file_response(name, data, content_type)
    return HttpResponseNotFound(
        f"No client file {filename!r} here: this studio serves {client_wheel()[0]} and {client_sdist()[0]}.\n",
        content_type="text/plain",
    )
