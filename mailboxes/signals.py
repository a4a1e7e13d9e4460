"""Relay's two custom signals (docs/architecture.md, "Signals"), sent inside the transaction."""
from django.dispatch import Signal

# A webhook event happened (`event`, with `messages`, `mailbox_ids` or `mailbox_id`; a
# delivery event with the outbox `mail` and its changed `deliveries`):
# webhooks/ records its deliveries in the same transaction.
event_happened = Signal()

# Mailboxes stopped being active and owe their cleanup (`mailbox_ids`, `not_before`).
mailboxes_ended = Signal()
