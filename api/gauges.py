"""The system's state for /metrics and the admin's first screen, read at most once per
RELAY_METRICS_CACHE_SECONDS into the shared cache."""
from datetime import datetime

from django.conf import settings
from django.core.cache import cache

from expiry.operators import cleanup_oldest_owed_since, cleanups_per_minute
from mailboxes.models import CleanupState, MailboxStatus
from core.clock import db_now
from relay.models import OutboxStatus
from relay.outbox.operators import outbox_counts
from relay.reading import contents_words_owed, mailbox_counts
from webhooks.delivery import delivery_counts
from webhooks.models import DeliveryStatus

CACHE_KEY = "relay:operations:state"


def operations_state() -> dict:
    lifetime = settings.RELAY_METRICS_CACHE_SECONDS
    state = cache.get(CACHE_KEY) if lifetime else None
    if state is None:
        state = operations_state_read(now=db_now())
        if lifetime:
            cache.set(CACHE_KEY, state, lifetime)
    return state


def operations_state_read(*, now: datetime) -> dict:
    mailboxes = dict.fromkeys(MailboxStatus.values, 0)
    cleanups = dict.fromkeys((state for state in CleanupState.values if state), 0)
    for (status, cleanup_state), n in mailbox_counts().items():
        mailboxes[status] = mailboxes.get(status, 0) + n
        if cleanup_state:
            cleanups[cleanup_state] = cleanups.get(cleanup_state, 0) + n
    oldest = cleanup_oldest_owed_since()
    return {
        "read_at": now,
        "mailboxes": mailboxes,
        "cleanups": cleanups,
        # A running cleanup is still owed.
        "owed_cleanups": cleanups[CleanupState.PENDING] + cleanups[CleanupState.RUNNING],
        "oldest_owed_cleanup_seconds": max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
        "outbox": {**dict.fromkeys(OutboxStatus.values, 0), **outbox_counts()},
        "deliveries": {**dict.fromkeys(DeliveryStatus.values, 0), **delivery_counts()},
        "cleanups_per_minute": cleanups_per_minute(now=now),
        "words_owed": contents_words_owed(),
    }
