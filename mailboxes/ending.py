"""How a mailbox stops (expiry when due, deletion, "expire now", a provisioning that never
finished): the UPDATE that ends it owes its cleanup, and signals tell webhooks/ and expiry/."""
import logging
import uuid
from datetime import datetime

from django.db import transaction

from mailboxes import wakeups
from mailboxes.models import CleanupState, Mailbox, MailboxStatus, Message, cleanup_owed
from mailboxes.quotas import give_back_mailbox_slots
from mailboxes.signals import event_happened, mailboxes_ended
from owed import ERROR_MAX_CHARS, db_now

logger = logging.getLogger(__name__)

def announce_ended(mailbox_ids: list, *, not_before: datetime | None = None) -> None:
    """Say that these mailboxes ended and owe their cleanup: expiry/ queues it."""
    if mailbox_ids:
        mailboxes_ended.send(sender=Mailbox, mailbox_ids=list(mailbox_ids), not_before=not_before)


def mailboxes_expire_due(*, mailbox_ids: list, now: datetime | None = None, announce: bool = True) -> list:
    """Expire those of `mailbox_ids` that are due and owe their cleanup (`announce`: queued
    and waiters woken after commit). Returns the ids this call expired."""
    if not mailbox_ids:
        return []
    now = now or db_now()
    claim = uuid.uuid4()
    with transaction.atomic():
        # "Due" is part of the WHERE, which makes this a compare-and-set: of two callers
        # racing for one mailbox, only one moves it.
        moved = Mailbox.objects.due(now).filter(id__in=mailbox_ids).update(
            status=MailboxStatus.EXPIRED, expired_at=now, **cleanup_owed(now=now, claim=claim))
        if moved == len(mailbox_ids):
            expired = list(mailbox_ids)
        elif moved:
            # Someone else moved some of them first; the claim tells ours apart.
            expired = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        else:
            return []
        give_back_mailbox_slots(expired)
        event_happened.send(sender=Mailbox, event="mailbox.expired", mailbox_ids=expired)
        if announce:
            announce_ended(expired)
            # A cleanup task that expires its own mailbox (announce=False) runs the cleanup
            # itself and wakes no one: a waiter wakes itself at its mailbox's expires_at.
            wakeups.publish_on_commit(expired, "ended")
    logger.info("expired %d mailbox(es)", len(expired))
    return expired


def mailbox_delete(*, mailbox: Mailbox, now: datetime | None = None) -> None:
    """Soft-delete: the mailbox stops receiving at once, is deprovisioned like an expired
    one, and is invisible from then on."""
    now = now or db_now()
    with transaction.atomic():
        owes_cleanup = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.ACTIVE).update(
            status=MailboxStatus.DELETED, deleted_at=now, **cleanup_owed(now=now, claim=uuid.uuid4()))
        if owes_cleanup:
            give_back_mailbox_slots([mailbox.id])
            announce_ended([mailbox.id])
        else:
            # Expired already: its cleanup is under way or finished; leave that as it is.
            owes_cleanup = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.EXPIRED).update(
                status=MailboxStatus.DELETED, deleted_at=now)
        if owes_cleanup:
            # Its mail leaves the owner's searches; storing holds this row's lock to commit.
            Message.objects.filter(mailbox_id=mailbox.id).update(owner=None)
            event_happened.send(sender=Mailbox, event="mailbox.deleted", mailbox_ids=[mailbox.id])
            wakeups.publish_on_commit([mailbox.id], "ended")
    logger.info("deleted mailbox %s (%s)", mailbox.id, mailbox.address)


def mailboxes_force_expire(*, mailbox_ids: list) -> list:
    """The operator's "expire now": end these active mailboxes at once, due or not."""
    now = db_now()
    Mailbox.objects.receiving(now).filter(id__in=mailbox_ids).update(expires_at=now)
    return mailboxes_expire_due(mailbox_ids=mailbox_ids, now=now)


def provisioning_refused(*, mailbox_id, reason: str, now: datetime | None = None) -> None:
    """A provisioning refused because someone else's account was there: deleted, owing nothing."""
    now = now or db_now()
    with transaction.atomic():
        refused = Mailbox.objects.filter(id=mailbox_id, status=MailboxStatus.PROVISIONING).update(
            status=MailboxStatus.DELETED, deleted_at=now, provision_lease_until=None,
            cleanup_state=CleanupState.DONE, cleanup_done_at=now, cleanup_last_error=reason[:ERROR_MAX_CHARS])
        if refused:
            give_back_mailbox_slots([mailbox_id])
    logger.warning("refused mailbox %s: %s", mailbox_id, reason)


def provisionings_abandon(*, mailbox_ids: list, now: datetime | None = None, reason: str,
                          not_before: datetime | None = None) -> list:
    """Give up on mailboxes still `provisioning` (the backend failed, or their creator died):
    deleted, owing a deprovision from `not_before`, in case the backend made the account late."""
    if not mailbox_ids:
        return []
    now = now or db_now()
    claim = uuid.uuid4()
    with transaction.atomic():
        Mailbox.objects.filter(id__in=mailbox_ids, status=MailboxStatus.PROVISIONING).update(
            status=MailboxStatus.DELETED, deleted_at=now, provision_lease_until=None,
            **cleanup_owed(now=now, claim=claim, not_before=not_before))
        abandoned = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        give_back_mailbox_slots(abandoned)
        announce_ended(abandoned, not_before=not_before)
    if abandoned:
        logger.warning("gave up provisioning %d mailbox(es) (%s); their deprovision is queued", len(abandoned), reason)
    return abandoned
