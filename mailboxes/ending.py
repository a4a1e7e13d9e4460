"""How a mailbox stops: lazy expiry, deletion, "expire now", and a provisioning that
never finished. Every path that ends a mailbox goes through here, so the API, the SMTP
server, the sweep and the workers agree on it.

A mailbox that stops being active owes one deprovision on the mail backend. The row
records it (`cleanup_state = pending`) with a lease, in the same transaction that ends
the mailbox, and once that commits the `cleanups_owed` signal announces the ids. The
expiry app queues one cleanup task per id on that signal (expiry/publishing.py); if
that publish is lost, the lease lapses and a sweep queues the cleanup again. So this
module, at the bottom of the stack, needs to know nothing of Celery.
"""
import logging
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from mailboxes.models import CleanupState, Mailbox, MailboxStatus
from mailboxes.quotas import give_back_mailbox_slots

logger = logging.getLogger(__name__)

# Sent after commit with `mailbox_ids` (and `not_before`, a datetime or None): those
# mailboxes' cleanups became pending, to run no earlier than `not_before`.
cleanups_owed = Signal()
# Sent inside the transaction that ends mailboxes (`mailbox_ids`, `event`: "expired" or
# "deleted"), and that makes a cleanup a dead letter (`mailbox_id`): webhooks/ records
# its deliveries in that same transaction, so an event is owed exactly when it happened.
mailboxes_ended = Signal()
cleanup_dead = Signal()


def cleanup_lease_until(now: datetime, *, extra_seconds: float = 0) -> datetime:
    return now + timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS + extra_seconds)


def cleanup_pending_fields(*, now: datetime, claim: uuid.UUID, not_before: datetime | None = None) -> dict:
    """The fields that make a cleanup pending under `claim`, with a fresh lease (counted
    from `not_before` when the cleanup must wait): the one definition every path that
    owes a cleanup uses."""
    return {
        "cleanup_state": CleanupState.PENDING,
        "cleanup_claim": claim,
        "cleanup_queued_at": now,
        "cleanup_lease_until": cleanup_lease_until(max(now, not_before or now)),
    }


def publish_after_commit(mailbox_ids: list, *, not_before: datetime | None = None) -> None:
    """Announce owed cleanups once the transaction commits: a worker must never look for
    a pending cleanup that is not in the database yet."""
    if mailbox_ids:
        transaction.on_commit(lambda: cleanups_owed.send(sender=Mailbox, mailbox_ids=list(mailbox_ids),
                                                         not_before=not_before))


def mailboxes_expire_due(*, mailbox_ids: list, now: datetime | None = None, publish: bool = True) -> list:
    """Expire those of `mailbox_ids` that are due, mark their cleanup pending and (with
    `publish`) announce it after commit. Returns the ids this call expired: a mailbox
    another caller expired first is not among them."""
    if not mailbox_ids:
        return []
    now = now or timezone.now()
    claim = uuid.uuid4()
    with transaction.atomic():
        # "Due" is part of the WHERE, which makes this a compare-and-set: of two callers
        # racing for one mailbox, only one moves it.
        moved = Mailbox.objects.due(now).filter(id__in=mailbox_ids).update(
            status=MailboxStatus.EXPIRED, expired_at=now, **cleanup_pending_fields(now=now, claim=claim))
        if moved == len(mailbox_ids):
            expired = list(mailbox_ids)
        elif moved:
            # Someone else moved some of them first; the claim tells ours apart.
            expired = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        else:
            return []
        give_back_mailbox_slots(expired)
        mailboxes_ended.send(sender=Mailbox, mailbox_ids=expired, event="expired")
        if publish:
            publish_after_commit(expired)
    logger.info("expired %d mailbox(es)", len(expired))
    return expired


def mailbox_lazy_expire(*, mailbox: Mailbox, now: datetime | None = None) -> Mailbox:
    """The check every API access and every SMTP RCPT makes itself, so correctness never
    waits for a worker. Returns the mailbox as it now stands."""
    now = now or timezone.now()
    if mailbox.status == MailboxStatus.ACTIVE and mailbox.expires_at <= now:
        mailboxes_expire_due(mailbox_ids=[mailbox.id], now=now)
        mailbox.refresh_from_db(fields=["status", "expired_at", "cleanup_state"])
    return mailbox


# Lazy expiry of a whole list runs in batches of this many, so one list of thousands of
# due mailboxes never becomes one huge `id IN (...)` and one long transaction.
LAZY_EXPIRE_BATCH = 500


def mailboxes_lazy_expire(*, mailboxes, now: datetime | None = None) -> int:
    """Lazy expiry for a queryset of mailboxes about to be listed. Returns how many it ended."""
    now = now or timezone.now()
    ended = 0
    while True:
        due = list(mailboxes.due(now).values_list("id", flat=True)[:LAZY_EXPIRE_BATCH])
        if not due:
            return ended
        ended += len(mailboxes_expire_due(mailbox_ids=due, now=now))
        if len(due) < LAZY_EXPIRE_BATCH:
            return ended


def mailbox_delete(*, mailbox: Mailbox, now: datetime | None = None) -> None:
    """Soft-delete: the mailbox stops receiving at once, is deprovisioned like an expired
    one, and is invisible from then on."""
    now = now or timezone.now()
    with transaction.atomic():
        owes_cleanup = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.ACTIVE).update(
            status=MailboxStatus.DELETED, deleted_at=now, **cleanup_pending_fields(now=now, claim=uuid.uuid4()))
        if owes_cleanup:
            give_back_mailbox_slots([mailbox.id])
            publish_after_commit([mailbox.id])
        else:
            # Expired already: its cleanup is under way or finished; leave that as it is.
            owes_cleanup = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.EXPIRED).update(
                status=MailboxStatus.DELETED, deleted_at=now)
        if owes_cleanup:
            mailboxes_ended.send(sender=Mailbox, mailbox_ids=[mailbox.id], event="deleted")
    logger.info("deleted mailbox %s (%s)", mailbox.id, mailbox.address)


def mailboxes_force_expire(*, mailbox_ids: list) -> list:
    """The operator's "expire now": end these active mailboxes at once, due or not."""
    now = timezone.now()
    Mailbox.objects.filter(id__in=mailbox_ids, status=MailboxStatus.ACTIVE, expires_at__gt=now).update(expires_at=now)
    return mailboxes_expire_due(mailbox_ids=mailbox_ids, now=now)


def provisionings_abandon(*, mailbox_ids: list, now: datetime | None = None, reason: str,
                          not_before: datetime | None = None) -> list:
    """Give up on mailboxes still `provisioning`: the backend failed, or their creator
    died mid-call. They were never handed out, so they end as deleted (invisible, their
    address reserved for good), owing a deprovision in case the backend created the
    account after all; "not found" then counts as done. That deprovision waits until
    `not_before`: a create that timed out on our side may still finish on the backend's,
    and a deprovision that ran first would find nothing and leave the account behind.
    Returns the ids moved."""
    if not mailbox_ids:
        return []
    now = now or timezone.now()
    claim = uuid.uuid4()
    with transaction.atomic():
        Mailbox.objects.filter(id__in=mailbox_ids, status=MailboxStatus.PROVISIONING).update(
            status=MailboxStatus.DELETED, deleted_at=now, provision_lease_until=None,
            **cleanup_pending_fields(now=now, claim=claim, not_before=not_before))
        abandoned = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        give_back_mailbox_slots(abandoned)
        publish_after_commit(abandoned, not_before=not_before)
    if abandoned:
        logger.warning("gave up provisioning %d mailbox(es) (%s); their deprovision is queued", len(abandoned), reason)
    return abandoned
