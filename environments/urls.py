from django.urls import path

from . import views

app_name = "environments"
urlpatterns = [
    path("", views.environment_list, name="list"),
    path("new/", views.environment_new, name="new"),
    path("upload/", views.package_upload, name="upload"),
    path("<slug:slug>/", views.environment_edit, name="edit"),
    path("<slug:slug>/settings/", views.environment_settings, name="settings"),
    path("<slug:slug>/files/save/", views.file_save, name="file_save"),
    path("<slug:slug>/files/add/", views.file_add, name="file_add"),
    path("<slug:slug>/files/rename/", views.file_rename, name="file_rename"),
    path("<slug:slug>/files/delete/", views.file_delete, name="file_delete"),
    path("<slug:slug>/commit/", views.version_commit, name="commit"),
    path("<slug:slug>/versions/", views.version_list, name="versions"),
    path("<slug:slug>/versions/<int:number>/", views.version_detail, name="version"),
    path("<slug:slug>/versions/<int:number>/dependencies/", views.version_dependencies, name="dependencies"),
    path("<slug:slug>/versions/<int:number>/download/", views.version_download, name="download"),
    path("<slug:slug>/versions/<int:number>/harbor/", views.version_harbor, name="harbor"),
    path("<slug:slug>/versions/<int:number>/restore/", views.draft_restore, name="restore"),
    path("<slug:slug>/diff/", views.version_diff, name="diff"),
]
