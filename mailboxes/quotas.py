"""The plans' quotas (settings.RELAY_QUOTAS): active mailboxes per owner, sends per day,
recipients per send, stored bytes per mailbox. Each check raises QuotaExceeded with the
seconds until the call could succeed.

The counting checks run under a lock on the owner's row, held by the caller's
transaction, so two concurrent creates (or sends) cannot both take the last unit."""
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from mailboxes.errors import QuotaExceeded
from mailboxes.models import Mailbox, MailboxStatus, OutboundMessage, Owner

DAY = timedelta(days=1)


def quota(plan: str, name: str) -> int:
    return settings.RELAY_QUOTAS[plan][name]


def _lock(owner: Owner) -> None:
    Owner.objects.select_for_update().filter(id=owner.id).first()


def check_active_mailboxes(owner: Owner) -> None:
    """Call inside the transaction that creates the mailbox."""
    _lock(owner)
    limit = quota(owner.plan, "active_mailboxes")
    live = Mailbox.objects.filter(owner=owner, status__in=(MailboxStatus.PROVISIONING, MailboxStatus.ACTIVE))
    if live.count() >= limit:
        soonest = live.order_by("expires_at").values_list("expires_at", flat=True).first()
        wait = (soonest - timezone.now()).total_seconds() if soonest else 60
        raise QuotaExceeded(f"The {owner.plan} plan allows {limit} active mailboxes; delete one or wait for one "
                            "to expire.", retry_after=wait)


def check_send(owner: Owner, recipients: int) -> None:
    """Call inside the transaction that queues the send."""
    limit = quota(owner.plan, "recipients_per_send")
    if recipients > limit:
        raise QuotaExceeded(f"The {owner.plan} plan allows {limit} recipients per send; send to fewer at once.",
                            retry_after=DAY.total_seconds())
    _lock(owner)
    per_day = quota(owner.plan, "sends_per_day")
    window = OutboundMessage.objects.filter(mailbox__owner=owner, created_at__gt=timezone.now() - DAY)
    if window.count() >= per_day:
        oldest = window.order_by("created_at").values_list("created_at", flat=True).first()
        raise QuotaExceeded(f"The {owner.plan} plan allows {per_day} sends a day.",
                            retry_after=(oldest + DAY - timezone.now()).total_seconds())


def stored_bytes_limit(plan: str) -> int:
    return quota(plan, "stored_bytes_per_mailbox")
