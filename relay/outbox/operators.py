"""What an operator does with the outbox: requeue dead letters, count mails by status."""
from django.db.models import Count

from relay.models import OutboxMail

from relay.outbox.send import OUTBOX


def mails_requeue(*, mail_ids) -> int:
    """Dead letters back to queued, with a fresh set of attempts; the trigger wakes the
    mailers. Returns how many were requeued."""
    return len(OUTBOX.requeue(mail_ids))


def outbox_counts() -> dict[str, int]:
    """Mails by status, for the operator (/metrics, the admin's first screen)."""
    return dict(OutboxMail.objects.order_by().values_list("status").annotate(n=Count("id")))
