from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _sync_schedules(sender, **kwargs) -> None:
    from expiry.schedules import install_schedules

    install_schedules()


class ExpiryConfig(AppConfig):
    name = "expiry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from expiry.publishing import on_cleanups_owed
        from mailboxes.ending import cleanups_owed

        post_migrate.connect(_sync_schedules, sender=self, dispatch_uid="relay-sync-schedules")
        # Cleanups owed by the domain below (expiry, deletion, failed provisioning) are
        # queued here, so mailboxes/ needs no knowledge of Celery.
        cleanups_owed.connect(on_cleanups_owed, dispatch_uid="relay-publish-cleanups")
