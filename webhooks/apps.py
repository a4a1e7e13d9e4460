from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _install_schedule(sender, **kwargs) -> None:
    from webhooks.schedules import install_schedule

    install_schedule()


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mailboxes.signals import event_happened
        from webhooks import events

        post_migrate.connect(_install_schedule, sender=self, dispatch_uid="relay-webhook-schedule")
        # Each event is recorded in the transaction that causes it (webhooks/events.py).
        event_happened.connect(events.on_event_happened, dispatch_uid="relay-webhooks-events")
