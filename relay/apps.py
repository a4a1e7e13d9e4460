from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from relay import dkim_linear

        dkim_linear.install()
