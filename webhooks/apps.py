from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _install_schedule(sender, **kwargs) -> None:
    from webhooks.schedules import install_schedule

    install_schedule()


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mailboxes.ending import cleanup_dead, mailboxes_ended
        from relay.smtp import messages_stored
        from webhooks import events

        post_migrate.connect(_install_schedule, sender=self, dispatch_uid="relay-webhook-schedule")
        # Each event is recorded in the transaction that causes it (webhooks/events.py).
        messages_stored.connect(events.on_messages_stored, dispatch_uid="relay-webhooks-message")
        mailboxes_ended.connect(events.on_mailboxes_ended, dispatch_uid="relay-webhooks-ended")
        cleanup_dead.connect(events.on_cleanup_dead, dispatch_uid="relay-webhooks-dead")
