"""The sweep (beat, every RELAY_SWEEP_INTERVAL_SECONDS): expire what is due, abandon lapsed
provisionings, requeue lapsed cleanups, schedule the next ones; batches FOR UPDATE SKIP LOCKED."""
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Q, Value
from django.db.models.functions import Greatest, Least

from expiry.cleanup import cleanups_per_task, publish_cleanups, queue_cleanups_after_commit, queue_length
from mailboxes.lifecycle import mailboxes_expire_due, provisionings_abandon
from mailboxes.models import CLEANUPS, CleanupState, Mailbox, MailboxStatus
from core.clock import db_now

logger = logging.getLogger(__name__)

# A never-started cleanup's lease grows to at most this many leases between requeues.
MAX_LEASE_DOUBLINGS = 16


@dataclass
class SweepResult:
    expired: int = 0
    requeued: int = 0
    abandoned: int = 0


def _in_batches(claim_batch, batch_size: int, *, max_batches: int | None = None) -> int:
    """Run `claim_batch(batch_size)` in its own durable transaction until a batch comes back
    short, at most `max_batches` times (what one sweep publishes is bounded); returns the total."""
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
    # While tasks are queued, a lapsed never-started cleanup is most likely in the queue:
    # only stalled ones, or those past the longest lease, are queued again.
    backlog = bool(queue_length(settings.CELERY_TASK_DEFAULT_QUEUE))
    result.requeued = _in_batches(lambda size: _requeue_lapsed_batch(size, backlog=backlog), batch_size)
    if result.expired or result.requeued or result.abandoned:
        logger.info("sweep expired %d, requeued %d lapsed cleanup(s), abandoned %d lapsed provisioning(s)",
                    result.expired, result.requeued, result.abandoned)
    return result


def _expire_due_batch(batch_size: int) -> tuple[int, int]:
    now = db_now()
    # A mailbox scheduled for this very expires_at is left to its task for one interval.
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
    """Queue again the cleanups whose lease lapsed; a never-started one is leased for as long
    again as it waited (capped), so a backlog costs a few duplicates, not a storm."""
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
    """Queue expire tasks at `expires_at` for mailboxes falling due before the sweep after
    next (once per `expires_at`): it only shortens the lag, the sweep still expires them."""
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
