"""Retention: mailboxes that ended long ago go, with their mail; their addresses stay."""
import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from mailboxes.models import CleanupState, Mailbox, MailboxStatus, Message, MessageContent
from core.clock import db_now

logger = logging.getLogger(__name__)


def mailboxes_purge(*, now: datetime | None = None, batch_size: int = 1000) -> int:
    """Delete mailboxes that ended more than RELAY_RETENTION_DAYS ago, with their mail, in
    batches. Their addresses stay reserved (AddressReservation is never purged), and a
    mailbox whose cleanup is still owed or dead is kept until that is settled."""
    now = now or db_now()
    cutoff = now - timedelta(days=settings.RELAY_RETENTION_DAYS)
    ended = (Q(status=MailboxStatus.EXPIRED, expired_at__lt=cutoff) | Q(status=MailboxStatus.DELETED, deleted_at__lt=cutoff))
    settled = Q(cleanup_state__in=[CleanupState.NONE, CleanupState.DONE])
    purged = 0
    while True:
        ids = list(Mailbox.objects.filter(ended & settled).values_list("id", flat=True)[:batch_size])
        if not ids:
            break
        with transaction.atomic():
            messages = Message.objects.filter(mailbox_id__in=ids)
            content_ids = set(messages.values_list("content_id", flat=True))
            messages.delete()
            Mailbox.objects.filter(id__in=ids).delete()
            # A content shared with a mailbox still retained stays until that one goes.
            MessageContent.objects.filter(id__in=content_ids, messages__isnull=True).delete()
        purged += len(ids)
    if purged:
        logger.info("purged %d mailbox(es) past retention", purged)
    return purged
