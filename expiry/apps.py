from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _sync_schedules(sender, **kwargs) -> None:
    from expiry.schedules import install_schedules

    install_schedules()


class ExpiryConfig(AppConfig):
    name = "expiry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_sync_schedules, sender=self, dispatch_uid="relay-sync-schedules")
