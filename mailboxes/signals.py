"""Relay's one custom signal (docs/architecture.md, "Signals")."""
from django.dispatch import Signal

# Sent inside the transaction in which something a webhook may subscribe to happens.
# `event` is the webhook event's name: "message.received" (with `messages`, the new
# Message rows), "mailbox.expired" or "mailbox.deleted" (with `mailbox_ids`),
# "cleanup.dead" (with `mailbox_id`). webhooks/ records its deliveries in that same
# transaction, so a delivery is owed exactly when its event happened, whatever crashes.
# A signal, and the only one, because these things happen in apps below webhooks/
# (mailboxes/, relay/, expiry/), which must not import it; everything else a change
# causes is called where it happens.
event_happened = Signal()
