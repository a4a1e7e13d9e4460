"""Sending mail from a mailbox (POST /mailboxes/{id}/messages): an outbox row, within the
plan's quotas, sent by the mailer like every other mail (relay.outbox.sending)."""
from datetime import timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import Account
from mailboxes.errors import Forbidden, NotFound, QuotaExceeded
from mailboxes.models import Mailbox
from mailboxes.quotas import quota
from relay.models import OutboxKind, OutboxMail
from relay.outbox.sending import mail_queue

DAY = timedelta(days=1)


def check_send(owner: Account, recipients: int) -> None:
    """The plan's recipients-per-send and sends-per-day. Call inside the transaction that
    queues the send: the lock on the account's row serializes two concurrent sends, so
    they cannot both take the day's last one."""
    limit = quota(owner.plan, "recipients_per_send")
    if recipients > limit:
        raise QuotaExceeded(f"The {owner.plan} plan allows {limit} recipients per send; send to fewer at once.",
                            retry_after=DAY.total_seconds())
    Account.objects.select_for_update().filter(id=owner.id).first()
    per_day = quota(owner.plan, "sends_per_day")
    window = OutboxMail.objects.filter(kind=OutboxKind.SEND, mailbox__owner=owner,
                                       created_at__gt=timezone.now() - DAY)
    if window.count() >= per_day:
        oldest = window.order_by("created_at").values_list("created_at", flat=True).first()
        raise QuotaExceeded(f"The {owner.plan} plan allows {per_day} sends a day.",
                            retry_after=(oldest + DAY - timezone.now()).total_seconds())


def outbound_queue(*, mailbox: Mailbox, to: list[str], subject: str, text: str, html: str = "") -> OutboxMail:
    """Queue a message from `mailbox`, with its address as From. Only an account's
    mailbox may send (an anonymous token would make Relay an open spam cannon), within
    its plan's quotas."""
    if mailbox.owner_id is None:
        raise Forbidden("Sending mail needs an API key: anonymous mailbox tokens cannot send.")
    with transaction.atomic():
        check_send(mailbox.owner, len(to))
        return mail_queue(kind=OutboxKind.SEND, mailbox=mailbox, from_email=mailbox.address, to=to,
                          subject=subject, text=text, html=html)


def outbound_list(*, mailbox: Mailbox) -> QuerySet:
    return OutboxMail.objects.filter(mailbox=mailbox, kind=OutboxKind.SEND).order_by("-created_at", "-id")


def outbound_get(*, mailbox: Mailbox, outbound_id: int) -> OutboxMail:
    try:
        return outbound_list(mailbox=mailbox).get(id=outbound_id)
    except OutboxMail.DoesNotExist:
        raise NotFound() from None
