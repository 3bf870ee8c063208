from django.urls import path

from . import views

app_name = "runs"
urlpatterns = [
    path("runs/", views.run_list, name="list"),
    path("runs/new/", views.run_new, name="new"),
    path("runs/compare/", views.run_compare, name="compare"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="cancel"),
    path("rollouts/<int:rollout_id>/", views.rollout_detail, name="rollout"),
    path("rollouts/<int:rollout_id>/steps.json", views.rollout_steps_json, name="steps_json"),
    path("rollouts/<int:rollout_id>/timeline.json", views.rollout_timeline_json, name="timeline_json"),
    path("rollouts/<int:rollout_id>/rerun/", views.rollout_rerun, name="rerun"),
    path("episodes/", views.episodes_open, name="episodes"),
    path("agents/", views.agent_list, name="agents"),
    path("agents/new/", views.agent_new, name="agent_new"),
    path("agents/<int:agent_id>/", views.agent_detail, name="agent"),
]
