from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from runs import views as runs_views

from . import views
from .api import api

from django.templatetags.static import static as static_url
from django.views.generic import RedirectView

urlpatterns = [
    path("", views.home, name="home"),
    path("favicon.ico", RedirectView.as_view(url=static_url("favicon.svg"), permanent=True)),
    path("api/v1/", api.urls),
    # The installable Python client (studio_client), for `pip install <studio URL>/client/python`.
    path("client/python", views.client_python, name="client_python"),
    path("client/python/", views.client_python_files, name="client_python_files"),
    path("client/python/<str:filename>", views.client_python_file, name="client_python_file"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/signup/", views.signup, name="signup"),
    path("teams/new/", views.team_new, name="team_new"),
    path("t/<slug:team>/settings/", views.team_settings, name="team_settings"),
    path("t/<slug:team>/training-gate/", views.training_gate, name="training_gate"),
    path("t/<slug:team>/members/invite/", views.member_invite, name="member_invite"),
    path("t/<slug:team>/members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("t/<slug:team>/members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path("t/<slug:team>/tokens/new/", views.token_create, name="token_create"),
    path("t/<slug:team>/tokens/<int:token_id>/revoke/", views.token_revoke, name="token_revoke"),
    path("t/<slug:team>/", include("runs.review.urls")),
    path("t/<slug:team>/", include("runs.play_urls")),
    path("t/<slug:team>/environments/", include("environments.urls")),
    path("t/<slug:team>/", include("runs.protocols.urls")),
    path("t/<slug:team>/", include("runs.urls")),
    path("t/<slug:team>/", include("runs.quality.urls")),
    path("t/<slug:team>/", include("runs.curriculum.urls")),
    # Outside /t/<team>/ so that storage.url(name) needs no lookup; the view checks the rollout's team.
    path("artifacts/rollouts/<int:rollout_id>/<str:filename>", runs_views.artifact_serve, name="artifact"),
]

# Django's admin (staff accounts only) is served only where ADMIN_ENABLED asks for it: it bypasses
# every team check the studio makes, so an install that does not use it should not answer on it.
if settings.ADMIN_ENABLED:
    urlpatterns.insert(2, path("admin/", admin.site.urls))
