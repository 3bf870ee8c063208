from django.urls import path

from . import views

app_name = "protocols"

urlpatterns = [
    path("environments/<slug:slug>/versions/<int:number>/openenv/", views.openenv_show, name="openenv_show"),
    path("environments/<slug:slug>/versions/<int:number>/openenv/revoke/", views.openenv_revoke, name="openenv_revoke"),
]
