from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ApiConfig(AppConfig):
    """The HTTP layer over the domain apps: views, serializers, auth, throttles, errors.
    The only app that knows DRF."""

    name = "api"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api import metrics  # noqa: F401 (registers its deploy check)
        from api.agents import checks  # noqa: F401 (registers the MCP server's check)


class RelayAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with Relay's site (api/admin_site.py) as the default one."""

    default = False  # ApiConfig stays the default config of `api`

    default_site = "api.admin_site.RelayAdminSite"
