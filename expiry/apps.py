from django.apps import AppConfig
from django.db.models.signals import post_migrate


def sync_schedules(sender, **kwargs) -> None:
    from core.schedules import install_schedules
    from relay.backends import keeps_accounts

    install_schedules(read_mail_server=keeps_accounts())


class ExpiryConfig(AppConfig):
    name = "expiry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from expiry.cleanup import on_mailboxes_ended
        from mailboxes.signals import mailboxes_ended

        post_migrate.connect(sync_schedules, sender=self, dispatch_uid="relay-sync-schedules")
        mailboxes_ended.connect(on_mailboxes_ended, dispatch_uid="relay-expiry-queue-cleanups")
