from django.contrib import admin

from .models import Draft, Environment, EnvironmentVersion


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "team", "kind", "updated_at")
    list_filter = ("kind", "team")
    search_fields = ("slug", "name")


@admin.register(Draft)
class DraftAdmin(admin.ModelAdmin):
    list_display = ("environment", "revision", "updated_by", "updated_at")


@admin.register(EnvironmentVersion)
class EnvironmentVersionAdmin(admin.ModelAdmin):
    list_display = ("environment", "number", "author", "message", "content_hash", "created_at")
    readonly_fields = [f.name for f in EnvironmentVersion._meta.fields]

    def has_change_permission(self, request, obj=None):
        return False
