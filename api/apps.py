from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The HTTP layer over the domain apps: views, serializers, auth, throttles, errors.
    The only app that knows DRF."""

    name = "api"
    default_auto_field = "django.db.models.BigAutoField"
