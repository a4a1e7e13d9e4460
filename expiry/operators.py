"""What an operator does to cleanups: requeue dead letters, count things."""
import logging
import uuid

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from mailboxes.ending import cleanup_pending_fields, publish_after_commit
from mailboxes.models import CleanupState, Mailbox, MailboxStatus

logger = logging.getLogger(__name__)

# expirystats reports these statuses (SPEC §6); a mailbox still provisioning is not yet one.
REPORTED_STATUSES = (MailboxStatus.ACTIVE, MailboxStatus.EXPIRED, MailboxStatus.DELETED)


def cleanup_requeue(*, mailbox_ids: list) -> list:
    """The operator's "retry cleanup": queue these dead letters again with a fresh
    attempt count. Returns the ids requeued."""
    if not mailbox_ids:
        return []
    claim = uuid.uuid4()
    with transaction.atomic():
        Mailbox.objects.filter(id__in=mailbox_ids, cleanup_state=CleanupState.DEAD).update(
            cleanup_attempts=0, **cleanup_pending_fields(now=timezone.now(), claim=claim))
        requeued = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        publish_after_commit(requeued)
    if requeued:
        logger.info("requeued %d dead letter(s)", len(requeued))
    return requeued


def expiry_stats() -> dict:
    statuses = dict(Mailbox.objects.values_list("status").annotate(n=Count("id")).order_by())
    cleanups = dict(Mailbox.objects.exclude(cleanup_state=CleanupState.NONE)
                    .values_list("cleanup_state").annotate(n=Count("id")).order_by())
    return {
        "mailboxes": {status.value: statuses.get(status, 0) for status in REPORTED_STATUSES},
        "cleanup": {
            # A running cleanup is still owed.
            "pending": cleanups.get(CleanupState.PENDING, 0) + cleanups.get(CleanupState.RUNNING, 0),
            "done": cleanups.get(CleanupState.DONE, 0),
            "dead": cleanups.get(CleanupState.DEAD, 0),
        },
    }
