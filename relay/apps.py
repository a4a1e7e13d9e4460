from django.apps import AppConfig


class RelayConfig(AppConfig):
    name = "relay"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mailboxes.ending import cleanups_owed
        from relay.events import on_cleanups_owed

        # A mailbox that ends wakes whoever waits on it (relay/events.py).
        cleanups_owed.connect(on_cleanups_owed, dispatch_uid="relay-mailbox-ended-events")
