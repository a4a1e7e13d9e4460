"""How a mailbox stops: lazy expiry, deletion, "expire now", and a provisioning that
never finished. Every path that ends a mailbox goes through here, so the API, the SMTP
server, the sweep and the workers agree on it.

A mailbox that stops being active owes one deprovision on the mail backend. The row
records it (`cleanup_state = pending`) with a lease, in the same transaction that ends
the mailbox. What follows is called here, in order: inside the transaction, the
`event_happened` signal lets webhooks/ record its deliveries; once it commits, one
cleanup task per mailbox is queued (publish_cleanups) and its waiters are woken
(mailboxes.wakeups). A lost publish loses nothing: the lease lapses and a sweep queues
the cleanup again.
"""
import logging
import uuid
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from mailboxes import wakeups
from mailboxes.models import CleanupState, Mailbox, MailboxStatus
from mailboxes.quotas import give_back_mailbox_slots
from mailboxes.signals import event_happened
from owed import OwedWork

logger = logging.getLogger(__name__)

# A mailbox's cleanup is owed work (owed/, docs/architecture.md): expiry.cleanup takes
# and settles it, the sweep and the admin requeue it.
CLEANUPS = OwedWork(
    model=Mailbox, state="cleanup_state", prefix="cleanup_",
    owed=CleanupState.PENDING, running=CleanupState.RUNNING, dead=CleanupState.DEAD,
    max_retries=lambda: settings.RELAY_CLEANUP_MAX_RETRIES,
    backoff_seconds=lambda: settings.RELAY_CLEANUP_RETRY_BACKOFF_SECONDS,
    backoff_max_seconds=lambda: settings.RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS,
    lease_seconds=lambda: settings.RELAY_CLEANUP_LEASE_SECONDS,
)



def cleanup_lease_until(now: datetime) -> datetime:
    return CLEANUPS.lease(now)


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


# The tasks that deprovision one mailbox, or a batch of them (expiry/tasks.py), sent by
# name: expiry/ sits above this app, which must not import it.
EXPIRE_TASK = "expiry.tasks.expire_mailbox"
EXPIRE_BATCH_TASK = "expiry.tasks.expire_mailboxes"
# Cleanups one batch task runs where deprovisioning calls no server (the local backend):
# one claim, one outcome written for all, instead of a task and two statements each.
CLEANUP_BATCH = 200


def cleanups_per_task() -> int:
    """How many cleanups one task runs: a batch where a deprovision calls no server (the
    local backend, whose mailboxes are Relay's rows alone), else one per task, since each
    call then has its own slot under the backend's limit, its own retries and its own
    dead letter."""
    return CLEANUP_BATCH if settings.RELAY_BACKEND == "local" else 1


# Scheduled cleanups (expiry.sweep.schedule_upcoming) that fall due within this span of
# the first of them share one batch task, where cleanups_per_task allows, run at the last
# one's instant: none runs early, none waits longer than this for the others.
SCHEDULED_BATCH_SPAN = timedelta(milliseconds=50)


def publish_cleanups(mailbox_ids: list, *, etas: list[datetime] | None = None, batch: int | None = None) -> None:
    """Queue the expire tasks of these cleanups (one each, or a batch each where
    cleanups_per_task allows, or `batch`), over one broker connection. With `etas`, each
    task runs at its mailboxes' due instant and first expires those that are due. A
    publish that fails is only logged: the cleanup's lease lapses and a sweep queues it
    again (or, for a scheduled one, the sweep expires the mailbox when due)."""
    batch = batch or cleanups_per_task()
    if etas:
        tasks = _scheduled_batches(mailbox_ids, etas, batch)
    else:
        tasks = ((mailbox_ids[start:start + batch], None) for start in range(0, len(mailbox_ids), batch))
    with current_app.producer_or_acquire() as producer:
        for task_ids, eta in tasks:
            ids = [str(mailbox_id) for mailbox_id in task_ids]
            try:
                if batch == 1:
                    current_app.send_task(EXPIRE_TASK, args=(ids[0],), eta=eta, producer=producer)
                else:
                    current_app.send_task(EXPIRE_BATCH_TASK, args=(ids,), kwargs={"expire_due": True} if eta else {},
                                          eta=eta, producer=producer)
            except Exception:
                logger.exception("could not queue the cleanup of %s; the sweep will see to it", ", ".join(ids))


def _scheduled_batches(mailbox_ids: list, etas: list[datetime], batch: int):
    """(ids, eta) per task: in the order they fall due, at most `batch` and at most
    SCHEDULED_BATCH_SPAN apart each, to run at the last one's instant."""
    ids, first, last = [], None, None
    for mailbox_id, eta in sorted(zip(mailbox_ids, etas), key=lambda pair: pair[1]):
        if ids and (len(ids) == batch or eta - first > SCHEDULED_BATCH_SPAN):
            yield ids, last
            ids = []
        if not ids:
            first = eta
        ids.append(mailbox_id)
        last = eta
    if ids:
        yield ids, last


def publish_after_commit(mailbox_ids: list, *, not_before: datetime | None = None) -> None:
    """Queue the owed cleanups once the transaction commits: a worker must never look
    for a pending cleanup that is not in the database yet."""
    if mailbox_ids:
        ids = list(mailbox_ids)
        etas = [not_before] * len(ids) if not_before else None
        transaction.on_commit(lambda: publish_cleanups(ids, etas=etas))


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
        event_happened.send(sender=Mailbox, event="mailbox.expired", mailbox_ids=expired)
        if publish:
            publish_after_commit(expired)
            # The sweep (publish=False) wakes no one: a waiter already wakes itself at its
            # mailbox's expires_at, and a burst would otherwise publish once per mailbox.
            wakeups.publish_after_commit(expired, "ended")
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
            event_happened.send(sender=Mailbox, event="mailbox.deleted", mailbox_ids=[mailbox.id])
            wakeups.publish_after_commit([mailbox.id], "ended")
    logger.info("deleted mailbox %s (%s)", mailbox.id, mailbox.address)


def mailboxes_force_expire(*, mailbox_ids: list) -> list:
    """The operator's "expire now": end these active mailboxes at once, due or not."""
    now = timezone.now()
    Mailbox.objects.filter(id__in=mailbox_ids, status=MailboxStatus.ACTIVE, expires_at__gt=now).update(expires_at=now)
    return mailboxes_expire_due(mailbox_ids=mailbox_ids, now=now)


def provisioning_refused(*, mailbox_id, reason: str, now: datetime | None = None) -> None:
    """A provisioning the backend refused because the account was already there, made by
    someone else: the mailbox ends deleted (invisible, its address reserved for good),
    owing nothing, since there is nothing of Relay's on the backend to remove."""
    now = now or timezone.now()
    with transaction.atomic():
        refused = Mailbox.objects.filter(id=mailbox_id, status=MailboxStatus.PROVISIONING).update(
            status=MailboxStatus.DELETED, deleted_at=now, provision_lease_until=None,
            cleanup_state=CleanupState.DONE, cleanup_done_at=now, cleanup_last_error=reason[:1000])
        if refused:
            give_back_mailbox_slots([mailbox_id])
    logger.warning("refused mailbox %s: %s", mailbox_id, reason)


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
