"""Reads of mailboxes and messages as a caller may see them."""
from django.db.models import QuerySet
from django.utils import timezone
from rest_framework.exceptions import NotFound

from expiry.services import mailbox_expire_if_due, mailboxes_expire
from mailboxes.authentication import Principal
from mailboxes.errors import Expired
from mailboxes.models import Mailbox, MailboxStatus


def mailboxes_visible_to(principal: Principal) -> QuerySet:
    """The caller's mailboxes, deleted ones never: another owner's mailbox is as absent
    as one that does not exist."""
    mailboxes = Mailbox.objects.exclude(status=MailboxStatus.DELETED)
    if principal.owner is not None:
        return mailboxes.filter(owner=principal.owner)
    return mailboxes.filter(id=principal.mailbox_id)


def mailbox_list(*, principal: Principal, include_expired: bool) -> QuerySet:
    visible = mailboxes_visible_to(principal)
    # Lazy expiry for the whole list: what is due is expired before it is shown.
    due = list(visible.filter(status=MailboxStatus.ACTIVE, expires_at__lte=timezone.now()).values_list("id", flat=True))
    mailboxes_expire(mailbox_ids=due)
    if not include_expired:
        visible = visible.filter(status=MailboxStatus.ACTIVE)
    return visible.order_by("-created_at", "-id")


def mailbox_get(*, principal: Principal, mailbox_id) -> Mailbox:
    """The caller's mailbox, expired on the spot if it is due; 404 if not theirs."""
    try:
        mailbox = mailboxes_visible_to(principal).get(id=mailbox_id)
    except Mailbox.DoesNotExist:
        raise NotFound() from None
    mailbox_expire_if_due(mailbox=mailbox)
    return mailbox


def mailbox_get_active(*, principal: Principal, mailbox_id) -> Mailbox:
    """For operations that need a live mailbox (messages, renew, send): 410 if expired."""
    mailbox = mailbox_get(principal=principal, mailbox_id=mailbox_id)
    if mailbox.status != MailboxStatus.ACTIVE:
        raise Expired()
    return mailbox
