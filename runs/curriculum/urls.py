from django.urls import path

from . import views

app_name = "curriculum"
urlpatterns = [
    path("curriculum/versions/<slug:slug>/<int:number>/tasks/", views.task_map, name="task_map"),
]
