"""What an operator does with the outbox: requeue dead letters, count mails by status."""
from django.db import transaction
from django.db.models import Count

from core.clock import db_now
from relay.models import DeliveryStatus, OutboxMail, RecipientDelivery
from relay.outbox.send import OUTBOX


def mails_requeue(*, mail_ids) -> int:
    """Dead letters back to queued, with a fresh set of attempts; the trigger wakes the
    mailers. The recipients a send failed for are owed again. Returns how many were requeued."""
    with transaction.atomic():
        requeued = OUTBOX.requeue(mail_ids)
        RecipientDelivery.objects.filter(mail_id__in=list(requeued), status=DeliveryStatus.FAILED).update(
            status=DeliveryStatus.QUEUED, smtp_code=None, detail="requeued by an operator", at=db_now())
    return len(requeued)


def outbox_counts() -> dict[str, int]:
    """Mails by status, for the operator (/metrics, the admin's first screen)."""
    return dict(OutboxMail.objects.order_by().values_list("status").annotate(n=Count("id")))
