"""The sweep: beat runs it every RELAY_SWEEP_INTERVAL_SECONDS. It expires every due
mailbox, gives up on provisionings whose creator vanished, requeues every cleanup whose
lease lapsed, and schedules expire tasks for mailboxes falling due before the next
sweeps.

Each batch is claimed in its own short transaction with FOR UPDATE SKIP LOCKED, so two
sweeps running at once (two beats, a slow sweep overlapping the next) take disjoint rows
instead of waiting on each other. Where SKIP LOCKED is missing (SQLite), the
compare-and-set in mailboxes_expire_due keeps them disjoint all the same.

A cleanup whose lease lapses may have lost its task (a killed worker, a flushed broker,
a failed publish), or may only be waiting behind a backlog longer than the lease. So a
requeue never invalidates the task already queued (whichever arrives first runs the
cleanup), and each requeue of a never-started cleanup doubles its lease: a backlog costs
a few duplicate messages, not a storm of them.
"""
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Q, Value
from django.db.models.functions import Greatest, Least

from expiry.dispatch import cleanups_per_task, publish_cleanups, queue_cleanups_after_commit, queue_length
from mailboxes.ending import mailboxes_expire_due, provisionings_abandon
from mailboxes.models import CLEANUPS, CleanupState, Mailbox, MailboxStatus
from owed.clock import db_now

logger = logging.getLogger(__name__)

# A never-started cleanup's lease grows to at most this many leases between requeues.
MAX_LEASE_DOUBLINGS = 16


@dataclass
class SweepResult:
    expired: int = 0
    requeued: int = 0
    abandoned: int = 0


def _in_batches(claim_batch, batch_size: int, *, max_batches: int | None = None) -> int:
    """Run `claim_batch(batch_size)` in its own durable transaction until a batch comes
    back short, at most `max_batches` (RELAY_SWEEP_MAX_BATCHES) times; returns the total
    it handled.
    The cap bounds what one sweep publishes (a 100,000-mailbox burst would otherwise be
    50,000 messages from one task, and the worker's memory for them): the rest is the
    next sweep's, an interval later, which the workers are still busy for anyway."""
    total = 0
    for _ in range(max_batches or settings.RELAY_SWEEP_MAX_BATCHES):
        with transaction.atomic(durable=True):
            found, handled = claim_batch(batch_size)
        total += handled
        if found < batch_size:
            break
    return total


def sweep_due_and_lapsed(*, batch_size: int | None = None) -> SweepResult:
    """Expire due mailboxes, abandon lapsed provisionings, requeue lapsed cleanups."""
    batch_size = batch_size or settings.RELAY_SWEEP_BATCH_SIZE
    result = SweepResult()
    result.expired = _in_batches(_expire_due_batch, batch_size)
    result.abandoned = _in_batches(_abandon_lapsed_provisionings_batch, batch_size)
    # While expire tasks are queued, a never-started cleanup whose lease lapsed is most
    # likely waiting in that queue: only those that started and stalled, or waited past
    # the longest lease, are queued again, or a backlog would be republished every lease.
    backlog = bool(queue_length(settings.CELERY_TASK_DEFAULT_QUEUE))
    result.requeued = _in_batches(lambda size: _requeue_lapsed_batch(size, backlog=backlog), batch_size)
    if result.expired or result.requeued or result.abandoned:
        logger.info("sweep expired %d, requeued %d lapsed cleanup(s), abandoned %d lapsed provisioning(s)",
                    result.expired, result.requeued, result.abandoned)
    return result


def _expire_due_batch(batch_size: int) -> tuple[int, int]:
    now = db_now()
    # A mailbox whose expire task was scheduled for this very expires_at is left to that
    # task for one sweep interval; after that the sweep takes it anyway (the task may
    # have been lost). Taking it at once would only queue a twin.
    grace = now - timedelta(seconds=settings.RELAY_SWEEP_INTERVAL_SECONDS)
    due = list(
        Mailbox.objects.due(now).select_for_update(skip_locked=True)
        .exclude(expiry_scheduled_for=F("expires_at"), expires_at__gt=grace)
        .order_by("expires_at")
        .values_list("id", flat=True)[:batch_size]
    )
    return len(due), len(mailboxes_expire_due(mailbox_ids=due, now=now))


def _abandon_lapsed_provisionings_batch(batch_size: int) -> tuple[int, int]:
    now = db_now()
    lapsed = list(
        Mailbox.objects.select_for_update(skip_locked=True)
        .filter(status=MailboxStatus.PROVISIONING, provision_lease_until__lte=now)
        .values_list("id", flat=True)[:batch_size]
    )
    abandoned = provisionings_abandon(mailbox_ids=lapsed, now=now, reason="its creator did not finish in time")
    return len(lapsed), len(abandoned)


def _max_wait() -> timedelta:
    return timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS * MAX_LEASE_DOUBLINGS)


def _requeue_lapsed_batch(batch_size: int, *, backlog: bool) -> tuple[int, int]:
    """Queue again the cleanups whose lease lapsed.

    A running one lost its worker mid-call: it goes back to pending with a fresh lease.
    A pending one may have lost its message, or may still be waiting behind a backlog:
    it is queued once more without touching the message already queued, and leased for
    as long again as it has been waiting (capped), so each requeue doubles the wait."""
    now = db_now()
    lapsed = Mailbox.objects.filter(CLEANUPS.lapsed(now))
    if backlog:
        lapsed = lapsed.filter(Q(cleanup_state=CleanupState.RUNNING) | Q(cleanup_queued_at__lte=now - _max_wait()))
    mailbox_ids = list(lapsed.select_for_update(skip_locked=True).order_by("cleanup_lease_until")
                       .values_list("id", flat=True)[:batch_size])
    if not mailbox_ids:
        return 0, 0
    waited = ExpressionWrapper(Value(now) - F("cleanup_queued_at"), output_field=DurationField())
    lease = Value(timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS))
    doubled = ExpressionWrapper(Value(now) + Least(Greatest(waited, lease), Value(_max_wait())),
                                output_field=DateTimeField())
    requeued = CLEANUPS.requeue_lapsed(mailbox_ids, now, owed_lease=doubled, cleanup_queued_at=now)
    if requeued:
        logger.warning("%d cleanup(s) lapsed without an outcome; queued again", len(requeued))
    queue_cleanups_after_commit(requeued)
    return len(mailbox_ids), len(requeued)


def schedule_upcoming(*, batch_size: int | None = None, now: datetime | None = None) -> int:
    """Queue expire tasks to run at `expires_at` for active mailboxes that fall due
    before the sweep after next, so their cleanup starts at the due instant instead of
    up to a sweep interval later. The task expires the mailbox itself when it runs
    (expiry/cleanup.py); if it is lost, or the mailbox was renewed, the sweep still
    expires it when due: this only shortens the lag, correctness never depends on it.

    Each mailbox is scheduled once per `expires_at` (`expiry_scheduled_for`). Workers
    hold scheduled tasks in memory until they run, so where a task cleans up one mailbox
    a sweep schedules at most `batch_size`; where one task runs a batch (those due within
    50 ms of each other, expiry.dispatch.publish_cleanups), they hold a timer per batch,
    not per mailbox, and a sweep schedules batch after batch, as it expires them
    (RELAY_SWEEP_MAX_BATCHES)."""
    batch_size = batch_size or settings.RELAY_SWEEP_BATCH_SIZE
    now = now or db_now()
    horizon = now + timedelta(seconds=2 * settings.RELAY_SWEEP_INTERVAL_SECONDS)
    return _in_batches(lambda size: _schedule_batch(size, now=now, horizon=horizon), batch_size,
                       max_batches=1 if cleanups_per_task() == 1 else None)


def _schedule_batch(batch_size: int, *, now: datetime, horizon: datetime) -> tuple[int, int]:
    upcoming = list(
        Mailbox.objects.receiving(now).select_for_update(skip_locked=True)
        .filter(expires_at__lte=horizon)
        .exclude(expiry_scheduled_for=F("expires_at"))
        .order_by("expires_at")
        .values_list("id", "expires_at")[:batch_size]
    )
    if not upcoming:
        return 0, 0
    Mailbox.objects.filter(id__in=[mailbox_id for mailbox_id, _ in upcoming]).update(
        expiry_scheduled_for=F("expires_at"))
    ids, etas = zip(*upcoming)
    transaction.on_commit(lambda: publish_cleanups(list(ids), etas=list(etas)))
    return len(upcoming), len(upcoming)
