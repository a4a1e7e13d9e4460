"""What an operator does to cleanups: requeue dead letters, count things."""
import logging
import uuid
from collections import Counter
from datetime import datetime, timedelta

from django.db.models import Count, Min
from django.db.models.functions import TruncMinute

from expiry.cleanup import queue_cleanups_after_commit
from mailboxes.models import CLEANUPS, CleanupState, Mailbox, MailboxStatus, cleanup_owed
from core.clock import db_now
from relay.reading import mailbox_counts

logger = logging.getLogger(__name__)

# expirystats reports these statuses (docs/architecture.md); a mailbox still provisioning is not yet one.
REPORTED_STATUSES = (MailboxStatus.ACTIVE, MailboxStatus.EXPIRED, MailboxStatus.DELETED)


def cleanup_requeue(*, mailbox_ids: list) -> list:
    """The operator's "retry cleanup": queue these dead letters again with a fresh
    attempt count. Returns the ids requeued."""
    requeued = CLEANUPS.requeue(mailbox_ids, **cleanup_owed(now=db_now(), claim=uuid.uuid4()))
    queue_cleanups_after_commit(requeued)
    if requeued:
        logger.info("requeued %d dead letter(s)", len(requeued))
    return requeued


def expiry_stats() -> dict:
    """What `expirystats` prints: mailboxes by status, cleanups by state."""
    statuses, cleanups = Counter(), Counter()
    for (status, cleanup_state), n in mailbox_counts().items():
        statuses[status] += n
        cleanups[cleanup_state] += n
    return {
        "mailboxes": {status.value: statuses[status] for status in REPORTED_STATUSES},
        "cleanup": {
            # A running cleanup is still owed.
            "pending": cleanups[CleanupState.PENDING] + cleanups[CleanupState.RUNNING],
            "done": cleanups[CleanupState.DONE],
            "dead": cleanups[CleanupState.DEAD],
        },
    }


def cleanup_oldest_owed_since() -> datetime | None:
    """When the longest-waiting owed cleanup was last queued (None when none is owed):
    read off the partial index of owed cleanups, however many have settled."""
    owed = Mailbox.objects.filter(CLEANUPS.still_owed())
    return owed.aggregate(oldest=Min("cleanup_queued_at"))["oldest"]


def cleanups_per_minute(*, now: datetime, minutes: int = 60) -> list[dict]:
    """Cleanups done and dead in each of the last `minutes` whole minutes, oldest first,
    the current minute last (partial)."""
    first = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)

    def per_minute(field: str) -> dict:
        rows = (Mailbox.objects.filter(**{f"{field}__gte": first}).order_by()
                .annotate(minute=TruncMinute(field)).values_list("minute").annotate(n=Count("id")))
        return dict(rows)

    done, dead = per_minute("cleanup_done_at"), per_minute("cleanup_dead_at")
    minutes_shown = (first + timedelta(minutes=i) for i in range(minutes))
    return [{"minute": minute, "done": done.get(minute, 0), "dead": dead.get(minute, 0)} for minute in minutes_shown]
