from django.urls import path

from . import views

app_name = "review"
urlpatterns = [
    path("review/", views.queue, name="queue"),
    path("review/next/", views.queue_next, name="next"),
    path("review/bulk/", views.bulk_decide, name="bulk"),
    path("review/<int:rollout_id>/", views.item, name="item"),
    path("review/<int:rollout_id>/decide/", views.decide, name="decide"),
    path("review/<int:rollout_id>/annotate/", views.annotate, name="annotate"),
    path("runs/<int:run_id>/export.jsonl", views.export_run, name="export_run"),
    path("environments/<slug:slug>/versions/<int:number>/export.jsonl", views.export_version, name="export_version"),
]
