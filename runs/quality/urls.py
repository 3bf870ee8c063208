from django.urls import path

from . import views

app_name = "quality"
urlpatterns = [
    path("quality/versions/<slug:slug>/<int:number>/card/", views.version_card, name="card"),
    path("quality/versions/<slug:slug>/<int:number>/audit/", views.audit_start, name="start"),
    path("quality/versions/<slug:slug>/<int:number>/gate-override/", views.gate_override, name="gate_override"),
    path("quality/audits/<int:audit_id>/", views.audit_detail, name="audit"),
    path("quality/audits/<int:audit_id>/cancel/", views.audit_cancel, name="cancel"),
    path("quality/versions/<slug:slug>/<int:number>/reverify/", views.reverify_start, name="reverify"),
    path("quality/versions/<slug:slug>/<int:number>/reverify/confirm/", views.reverify_confirm, name="reverify_confirm"),
    path("quality/reverifications/<int:reverification_id>/", views.reverification_part, name="reverification"),
    path("quality/compare/", views.version_ab, name="compare"),
]
