"""Relay's two custom signals (docs/architecture.md, "Signals"). Both are sent inside
the transaction in which their change happens, by mailboxes/ and relay/, which sit below
the apps that act on them (expiry/, webhooks/) and must not import them."""
from django.dispatch import Signal

# Something a webhook may subscribe to happened. `event` is the webhook event's name:
# "message.received" (with `messages`, the new Message rows), "mailbox.expired" or
# "mailbox.deleted" (with `mailbox_ids`), "cleanup.dead" (with `mailbox_id`). webhooks/
# records its deliveries in that same transaction, so a delivery is owed exactly when
# its event happened, whatever crashes.
event_happened = Signal()

# Mailboxes stopped being active and now owe their cleanup on the mail backend
# (`mailbox_ids`; `not_before`: not before this instant). expiry/ queues the cleanup
# tasks once the transaction commits.
mailboxes_ended = Signal()
