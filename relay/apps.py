from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"
    default_auto_field = "django.db.models.BigAutoField"
