from django.apps import AppConfig


class ProtocolsConfig(AppConfig):
    name = "runs.protocols"
    label = "protocols"
    verbose_name = "Training-loop protocols"
    default_auto_field = "django.db.models.BigAutoField"
