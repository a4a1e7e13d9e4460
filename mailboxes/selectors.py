"""Reads of mailboxes, messages and sent mail as a caller may see them. Each returns rows
or raises the domain's NotFound / MailboxExpired."""
from django.db.models import QuerySet

from mailboxes.ending import mailbox_lazy_expire, mailboxes_lazy_expire
from mailboxes.errors import MailboxExpired, NotFound
from mailboxes.keys import Caller
from mailboxes.models import Mailbox, MailboxStatus, Message, MessageContent


def mailboxes_visible_to(caller: Caller) -> QuerySet:
    """The caller's mailboxes, deleted and provisioning ones never: another owner's
    mailbox is as absent as one that does not exist."""
    mailboxes = Mailbox.objects.visible()
    if caller.owner is not None:
        return mailboxes.filter(owner=caller.owner)
    return mailboxes.filter(id=caller.mailbox_id)


def mailbox_list(*, caller: Caller, include_expired: bool) -> QuerySet:
    visible = mailboxes_visible_to(caller)
    # Lazy expiry for the whole list: what is due is expired before it is shown.
    mailboxes_lazy_expire(mailboxes=visible)
    if not include_expired:
        visible = visible.filter(status=MailboxStatus.ACTIVE)
    return visible.order_by("-created_at", "-id")


def mailbox_get(*, caller: Caller, mailbox_id) -> Mailbox:
    """The caller's mailbox, expired on the spot if it is due."""
    try:
        mailbox = mailboxes_visible_to(caller).get(id=mailbox_id)
    except Mailbox.DoesNotExist:
        raise NotFound() from None
    return mailbox_lazy_expire(mailbox=mailbox)


def mailbox_get_active(*, caller: Caller, mailbox_id) -> Mailbox:
    """For operations that need a live mailbox (messages, renew, send)."""
    mailbox = mailbox_get(caller=caller, mailbox_id=mailbox_id)
    if mailbox.status != MailboxStatus.ACTIVE:
        raise MailboxExpired()
    return mailbox


def message_list(*, mailbox: Mailbox) -> QuerySet:
    return Message.objects.filter(mailbox=mailbox).order_by("-received_at", "-id")


def message_get(*, mailbox: Mailbox, message_id: int) -> Message:
    """One message of `mailbox` with its parsed content (not its raw bytes)."""
    try:
        return Message.objects.select_related("content").defer("content__raw").get(mailbox=mailbox, id=message_id)
    except Message.DoesNotExist:
        raise NotFound() from None


def message_raw(*, mailbox: Mailbox, message_id: int) -> bytes:
    """The exact bytes received."""
    raw = (MessageContent.objects.filter(messages__mailbox=mailbox, messages__id=message_id)
           .values_list("raw", flat=True).first())
    if raw is None:
        raise NotFound()
    return bytes(raw)
