from django.apps import AppConfig


class DomainsConfig(AppConfig):
    name = "domains"
    default_auto_field = "django.db.models.BigAutoField"
