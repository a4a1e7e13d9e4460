from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mailboxes.signals import event_happened
        from webhooks import events

        # Each event is recorded in the transaction that causes it (webhooks/events.py).
        event_happened.connect(events.on_event_happened, dispatch_uid="relay-webhooks-events")
