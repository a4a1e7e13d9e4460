"""When and how a mailbox stops: lazy expiry, the sweep, the cleanup of one mailbox, the
retention purge. Every path that ends a mailbox goes through `mailboxes_expire` or
`mailbox_delete`, so the API, the SMTP server, the sweep and the workers agree.

A mailbox that stops being active owes one deprovision on the mail backend. The row
records it (`cleanup_state`) with a lease:

- whoever moves a cleanup to `pending` queues one `expire_mailbox(id)` task after
  commit and leases the cleanup for RELAY_CLEANUP_LEASE_SECONDS;
- a task runs the cleanup only after a compare-and-set from `pending` to `running`: a
  duplicate message, a redelivery or a second worker finds nothing to take and stops;
- a lease that lapses (the task was lost with a killed worker, a flushed broker or a
  failed publish) is found by the next sweep, which queues the cleanup again.

A queued task may simply be waiting behind a backlog longer than the lease, so a
requeue never invalidates the task already queued (whichever arrives first runs the
cleanup), and each requeue of a never-started cleanup doubles its lease: a backlog
costs a few duplicate messages, not a storm of them.

So the database, not the broker, holds what is owed, and the attempt count lives in the
row, where no lost message can reset it.
"""
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import connection, transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Q, Value
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from mailboxes.models import CleanupState, Mailbox, MailboxStatus, Message
from relay.backends import PermanentBackendError, TransientBackendError, get_backend

logger = logging.getLogger(__name__)

OWED = (CleanupState.PENDING, CleanupState.RUNNING)
# A never-started cleanup's lease grows to at most this many leases between requeues.
MAX_LEASE_DOUBLINGS = 16


def _lease_until(now: datetime, *, extra_seconds: float = 0) -> datetime:
    return now + timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS + extra_seconds)


def _enqueue_after_commit(mailbox_ids: list) -> None:
    """Queue one cleanup task per mailbox once the transaction commits: a worker must never
    look for a pending cleanup that is not in the database yet. A publish that fails is
    only logged: the lease lapses and a sweep queues the cleanup again."""
    if not mailbox_ids:
        return

    def publish() -> None:
        from expiry.tasks import expire_mailbox

        # One producer (one broker connection) for the whole batch.
        with expire_mailbox.app.producer_or_acquire() as producer:
            for mailbox_id in mailbox_ids:
                try:
                    expire_mailbox.apply_async(args=(str(mailbox_id),), producer=producer)
                except Exception:
                    logger.exception("could not queue cleanup of %s; the sweep will retry it after its lease", mailbox_id)

    transaction.on_commit(publish)


# --- ending a mailbox ----------------------------------------------------------------
def mailboxes_expire(*, mailbox_ids: list, now: datetime | None = None, enqueue: bool = True) -> list:
    """Expire those of `mailbox_ids` that are active and due, mark their cleanup pending
    and (with `enqueue`) queue it after commit. Returns the ids this call expired: a
    mailbox another caller expired first is not among them."""
    if not mailbox_ids:
        return []
    now = now or timezone.now()
    claim = uuid.uuid4()
    with transaction.atomic():
        # The status and due-time conditions make this a compare-and-set: of two callers
        # racing for one mailbox, only one moves it.
        moved = Mailbox.objects.filter(id__in=mailbox_ids, status=MailboxStatus.ACTIVE, expires_at__lte=now).update(
            status=MailboxStatus.EXPIRED,
            expired_at=now,
            cleanup_state=CleanupState.PENDING,
            cleanup_claim=claim,
            cleanup_queued_at=now,
            cleanup_lease_until=_lease_until(now),
        )
        if moved == len(mailbox_ids):
            expired = list(mailbox_ids)
        elif moved:
            # Someone else moved some of them first; the claim tells ours apart.
            expired = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        else:
            return []
        if enqueue:
            _enqueue_after_commit(expired)
    if expired:
        logger.info("expired %d mailbox(es)", len(expired))
    return expired


def mailbox_expire_if_due(*, mailbox: Mailbox, now: datetime | None = None) -> Mailbox:
    """Lazy expiry: the check every API access and every SMTP RCPT makes itself, so
    correctness never waits for a worker. Returns the mailbox as it now stands."""
    now = now or timezone.now()
    if mailbox.status == MailboxStatus.ACTIVE and mailbox.expires_at <= now:
        mailboxes_expire(mailbox_ids=[mailbox.id], now=now)
        mailbox.refresh_from_db(fields=["status", "expired_at", "cleanup_state"])
    return mailbox


def mailbox_delete(*, mailbox: Mailbox, now: datetime | None = None) -> None:
    """Soft-delete: the mailbox stops receiving at once, is deprovisioned like an expired
    one, and is invisible from then on."""
    now = now or timezone.now()
    with transaction.atomic():
        owes_cleanup = Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.ACTIVE).update(
            status=MailboxStatus.DELETED,
            deleted_at=now,
            cleanup_state=CleanupState.PENDING,
            cleanup_queued_at=now,
            cleanup_lease_until=_lease_until(now),
        )
        if owes_cleanup:
            _enqueue_after_commit([mailbox.id])
        else:
            # Expired already: its cleanup is under way or finished; leave that as it is.
            Mailbox.objects.filter(id=mailbox.id, status=MailboxStatus.EXPIRED).update(
                status=MailboxStatus.DELETED, deleted_at=now
            )
    logger.info("deleted mailbox %s (%s)", mailbox.id, mailbox.address)


def cleanup_requeue(*, mailbox_ids: list, now: datetime | None = None) -> list:
    """The operator's "retry cleanup": queue these dead letters again with a fresh
    attempt count. Returns the ids requeued."""
    if not mailbox_ids:
        return []
    now = now or timezone.now()
    claim = uuid.uuid4()
    with transaction.atomic():
        Mailbox.objects.filter(id__in=mailbox_ids, cleanup_state=CleanupState.DEAD).update(
            cleanup_state=CleanupState.PENDING,
            cleanup_claim=claim,
            cleanup_attempts=0,
            cleanup_queued_at=now,
            cleanup_lease_until=_lease_until(now),
        )
        requeued = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
        _enqueue_after_commit(requeued)
    if requeued:
        logger.info("requeued %d dead letter(s)", len(requeued))
    return requeued


# --- the sweep ------------------------------------------------------------------------
@dataclass
class SweepResult:
    expired: int = 0
    requeued: int = 0
    scheduled: int = 0


def cleanup_sweep(*, batch_size: int | None = None, max_batches: int = 1000) -> SweepResult:
    """Expire every due active mailbox and requeue every cleanup whose lease lapsed.

    Each batch is claimed in its own short transaction with FOR UPDATE SKIP LOCKED, so
    two sweeps running at once (two beats, a slow sweep overlapping the next) take
    disjoint rows instead of waiting on each other. Where SKIP LOCKED is missing
    (SQLite), the compare-and-set in `mailboxes_expire` keeps them disjoint all the same."""
    batch_size = batch_size or settings.RELAY_SWEEP_BATCH_SIZE
    result = SweepResult()
    for _ in range(max_batches):
        with transaction.atomic(durable=True):
            now = timezone.now()
            # A mailbox whose expire task was scheduled for this very expires_at is left
            # to that task for one sweep interval; after that the sweep takes it anyway
            # (the task may have been lost). Taking it at once would only queue a twin.
            grace = now - timedelta(seconds=settings.RELAY_SWEEP_INTERVAL_SECONDS)
            due = list(
                Mailbox.objects.select_for_update(skip_locked=True)
                .filter(status=MailboxStatus.ACTIVE, expires_at__lte=now)
                .exclude(expiry_scheduled_for=F("expires_at"), expires_at__gt=grace)
                .order_by("expires_at")
                .values_list("id", flat=True)[:batch_size]
            )
            result.expired += len(mailboxes_expire(mailbox_ids=due, now=now))
        if len(due) < batch_size:
            break
    # A never-started cleanup whose lease lapsed while expire tasks are still queued is
    # most likely waiting in that queue, not lost: requeueing it would only add a twin
    # behind it, and a 100,000-mailbox backlog would be republished whole every lease
    # (bench/expiry_burst.py). So while the queue holds work, only cleanups that
    # started and stalled, or have waited past the longest lease, are queued again.
    backlog = _queued_expire_tasks() > 0
    for _ in range(max_batches):
        with transaction.atomic(durable=True):
            now = timezone.now()
            lapsed = Mailbox.objects.filter(cleanup_state__in=OWED, cleanup_lease_until__lte=now)
            if backlog:
                lapsed = lapsed.filter(Q(cleanup_state=CleanupState.RUNNING) | Q(cleanup_queued_at__lte=now - _max_wait()))
            lapsed = list(lapsed.select_for_update(skip_locked=True).order_by("cleanup_lease_until")
                          .values_list("id", flat=True)[:batch_size])
            result.requeued += len(_requeue_lapsed(lapsed, now))
        if len(lapsed) < batch_size:
            break
    if settings.RELAY_EXPIRY_SCHEDULE_AHEAD:
        result.scheduled = mailboxes_schedule_upcoming(batch_size=batch_size)
    if result.expired or result.requeued or result.scheduled:
        logger.info("sweep expired %d, requeued %d lapsed cleanup(s), scheduled %d upcoming",
                    result.expired, result.requeued, result.scheduled)
    return result


def mailboxes_schedule_upcoming(*, batch_size: int, now: datetime | None = None) -> int:
    """Queue `expire_mailbox` to run at `expires_at` for active mailboxes that fall due
    before the sweep after next, so their cleanup starts at the due instant instead of
    up to a sweep interval later. The task expires the mailbox itself when it runs
    (mailbox_cleanup); if it is lost, or the mailbox was renewed, the sweep still
    expires it when due: this only shortens the lag, correctness never depends on it.

    Each mailbox is scheduled once per `expires_at` (`expiry_scheduled_for`); at most
    `batch_size` a sweep, since workers hold scheduled tasks in memory until they run."""
    now = now or timezone.now()
    horizon = now + timedelta(seconds=2 * settings.RELAY_SWEEP_INTERVAL_SECONDS)
    with transaction.atomic(durable=True):
        upcoming = list(
            Mailbox.objects.select_for_update(skip_locked=True)
            .filter(status=MailboxStatus.ACTIVE, expires_at__gt=now, expires_at__lte=horizon)
            .exclude(expiry_scheduled_for=F("expires_at"))
            .order_by("expires_at")
            .values_list("id", "expires_at")[:batch_size]
        )
        Mailbox.objects.filter(id__in=[mailbox_id for mailbox_id, _ in upcoming]).update(
            expiry_scheduled_for=F("expires_at"))

        def publish() -> None:
            from expiry.tasks import expire_mailbox

            with expire_mailbox.app.producer_or_acquire() as producer:
                for mailbox_id, expires_at in upcoming:
                    try:
                        expire_mailbox.apply_async(args=(str(mailbox_id),), eta=expires_at, producer=producer)
                    except Exception:
                        logger.exception("could not schedule the expiry of %s; the sweep will expire it", mailbox_id)

        transaction.on_commit(publish)
    return len(upcoming)


def _max_wait() -> timedelta:
    return timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS * MAX_LEASE_DOUBLINGS)


def _queued_expire_tasks() -> int:
    """Messages waiting in the expire tasks' queue; 0 if the broker cannot say."""
    from expiry.tasks import expire_mailbox

    try:
        with expire_mailbox.app.connection_for_read() as conn:
            return conn.default_channel.queue_declare(queue="celery", passive=True).message_count
    except Exception:
        logger.warning("could not read the length of the task queue", exc_info=True)
        return 0


def _requeue_lapsed(mailbox_ids: list, now: datetime) -> list:
    """Queue again the cleanups (of `mailbox_ids`, locked by the caller) whose lease lapsed.

    A running one lost its worker mid-call: it goes back to pending with a fresh lease.
    A pending one may have lost its message, or may still be waiting behind a backlog:
    it is queued once more without touching the message already queued, and leased for
    as long again as it has been waiting (capped), so each requeue doubles the wait."""
    if not mailbox_ids:
        return []
    claim = uuid.uuid4()
    lapsed = Mailbox.objects.filter(id__in=mailbox_ids, cleanup_lease_until__lte=now)
    lapsed.filter(cleanup_state=CleanupState.RUNNING).update(
        cleanup_state=CleanupState.PENDING, cleanup_claim=claim, cleanup_queued_at=now,
        cleanup_lease_until=_lease_until(now),
    )
    max_wait = _max_wait()
    waited = ExpressionWrapper(Value(now) - F("cleanup_queued_at"), output_field=DurationField())
    lapsed.filter(cleanup_state=CleanupState.PENDING).exclude(cleanup_claim=claim).update(
        cleanup_claim=claim,
        cleanup_lease_until=ExpressionWrapper(
            Value(now) + Least(Greatest(waited, Value(timedelta(seconds=settings.RELAY_CLEANUP_LEASE_SECONDS))),
                               Value(max_wait)),
            output_field=DateTimeField(),
        ),
    )
    requeued = list(Mailbox.objects.filter(id__in=mailbox_ids, cleanup_claim=claim).values_list("id", flat=True))
    if requeued:
        logger.warning("%d cleanup(s) lapsed without an outcome; queued again", len(requeued))
    _enqueue_after_commit(requeued)
    return requeued


# --- the cleanup of one mailbox -------------------------------------------------------
class CleanupOutcome(StrEnum):
    SKIPPED = "skipped"  # not due, done, dead, or running elsewhere: nothing done
    EARLY = "early"  # a scheduled task that ran a moment before its mailbox was due
    DONE = "done"
    DEAD = "dead"


def cleanup_attempt_limit() -> int:
    return settings.RELAY_CLEANUP_MAX_RETRIES + 1


def mailbox_cleanup(*, mailbox_id, final_attempt: bool, retry_wait_max_seconds: float) -> CleanupOutcome:
    """Deprovision one mailbox, if its cleanup is pending and nobody else runs it.

    Raises TransientBackendError when the caller should retry (the row then stays
    pending, leased for the retry's wait). Anything else the backend raises is recorded
    and re-raised: the task fails, the lease lapses, and a sweep tries again, each try
    counted, until the cleanup is dead."""
    now = timezone.now()
    run = uuid.uuid4()
    mailbox = _take(mailbox_id, run=run, now=now)
    # A task queued before the mailbox was due expires it itself once it is.
    if mailbox is None and mailboxes_expire(mailbox_ids=[mailbox_id], now=now, enqueue=False):
        mailbox = _take(mailbox_id, run=run, now=now)
    if mailbox is None:
        logger.debug("cleanup of %s: nothing to take (not due, done, dead, or running elsewhere)", mailbox_id)
        if Mailbox.objects.filter(id=mailbox_id, status=MailboxStatus.ACTIVE, expires_at__gt=now,
                                  expiry_scheduled_for=F("expires_at"), expires_at__lte=now + timedelta(seconds=1)).exists():
            return CleanupOutcome.EARLY
        return CleanupOutcome.SKIPPED
    limit = cleanup_attempt_limit()

    if mailbox.cleanup_attempts > limit:
        # Earlier attempts ended without an outcome (their worker died mid-call): a
        # poison pill. Park it rather than let it take workers down forever.
        _finish(mailbox_id, run, CleanupState.DEAD, error=mailbox.cleanup_last_error or
                f"{mailbox.cleanup_attempts - 1} attempts ended without an outcome")
        return CleanupOutcome.DEAD

    try:
        get_backend().deprovision(mailbox)
    except TransientBackendError as exc:
        if final_attempt or mailbox.cleanup_attempts >= limit:
            _finish(mailbox_id, run, CleanupState.DEAD, error=str(exc))
            return CleanupOutcome.DEAD
        # Back to pending for the retry Celery is about to schedule, leased past its
        # longest possible wait so a sweep does not queue a second copy meanwhile.
        failed_at = timezone.now()
        Mailbox.objects.filter(id=mailbox_id, cleanup_state=CleanupState.RUNNING, cleanup_claim=run).update(
            cleanup_state=CleanupState.PENDING,
            cleanup_last_error=str(exc)[:2000],
            cleanup_queued_at=failed_at,
            cleanup_lease_until=_lease_until(failed_at, extra_seconds=retry_wait_max_seconds),
        )
        logger.warning("cleanup of %s failed (attempt %d of %d), will retry: %s",
                       mailbox.address, mailbox.cleanup_attempts, limit, exc)
        raise
    except PermanentBackendError as exc:
        _finish(mailbox_id, run, CleanupState.DEAD, error=str(exc))
        return CleanupOutcome.DEAD
    except Exception as exc:
        Mailbox.objects.filter(id=mailbox_id, cleanup_state=CleanupState.RUNNING, cleanup_claim=run).update(
            cleanup_last_error=f"{type(exc).__name__}: {exc}"[:2000]
        )
        raise
    _finish(mailbox_id, run, CleanupState.DONE)
    return CleanupOutcome.DONE


def _take(mailbox_id, *, run: uuid.UUID, now: datetime) -> Mailbox | None:
    """Move a pending cleanup to running (the compare-and-set that makes one worker the
    runner) and return the row, or None if it was not pending.

    One statement with RETURNING, where update() plus a read would be two: this is the
    hot path of every expire task (bench/expiry_burst.py)."""
    fields = {f.name: f for f in Mailbox._meta.concrete_fields}
    prep = lambda name, value: fields[name].get_db_prep_value(value, connection)  # noqa: E731
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Mailbox._meta.db_table} SET cleanup_state = %s, cleanup_claim = %s, cleanup_lease_until = %s,"
            " cleanup_attempts = cleanup_attempts + 1 WHERE id = %s AND cleanup_state = %s"
            " RETURNING address, backend_id, cleanup_attempts, cleanup_last_error",
            [CleanupState.RUNNING, prep("cleanup_claim", run), prep("cleanup_lease_until", _lease_until(now)),
             prep("id", mailbox_id), CleanupState.PENDING],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    address, backend_id, attempts, last_error = row
    return Mailbox(id=mailbox_id, address=address, backend_id=backend_id, cleanup_attempts=attempts,
                   cleanup_last_error=last_error)


def _finish(mailbox_id, claim: uuid.UUID, state: CleanupState, *, error: str = "") -> None:
    changes = {"cleanup_state": state, "cleanup_lease_until": None, "cleanup_claim": None}
    if state == CleanupState.DONE:
        changes["cleanup_done_at"] = timezone.now()
    if error:
        changes["cleanup_last_error"] = error[:2000]
    # Only the runner still holding the cleanup records the outcome: if its lease lapsed
    # mid-call and a sweep handed the cleanup to another task, that one's outcome counts.
    Mailbox.objects.filter(id=mailbox_id, cleanup_state=CleanupState.RUNNING, cleanup_claim=claim).update(**changes)
    if state == CleanupState.DEAD:
        logger.error("cleanup of %s is a dead letter: %s", mailbox_id, error)
    else:
        logger.info("cleanup of %s done", mailbox_id)


def retry_wait_max_seconds(retries: int) -> float:
    """The longest Celery's exponential backoff may wait before retry number retries+1."""
    return min(settings.RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS,
               settings.RELAY_CLEANUP_RETRY_BACKOFF_SECONDS * (2 ** retries))


# --- operators ------------------------------------------------------------------------
def mailboxes_expire_now(*, mailbox_ids: list) -> list:
    """The admin's "expire now": end these active mailboxes at once, due or not."""
    now = timezone.now()
    Mailbox.objects.filter(id__in=mailbox_ids, status=MailboxStatus.ACTIVE, expires_at__gt=now).update(expires_at=now)
    return mailboxes_expire(mailbox_ids=mailbox_ids, now=now)


def expiry_stats() -> dict:
    from django.db.models import Count

    statuses = dict(Mailbox.objects.values_list("status").annotate(n=Count("id")).order_by())
    cleanups = dict(Mailbox.objects.exclude(cleanup_state=CleanupState.NONE)
                    .values_list("cleanup_state").annotate(n=Count("id")).order_by())
    return {
        "mailboxes": {status: statuses.get(status, 0) for status in MailboxStatus.values},
        "cleanup": {
            # A running cleanup is still owed.
            "pending": cleanups.get(CleanupState.PENDING, 0) + cleanups.get(CleanupState.RUNNING, 0),
            "done": cleanups.get(CleanupState.DONE, 0),
            "dead": cleanups.get(CleanupState.DEAD, 0),
        },
    }


# --- retention ------------------------------------------------------------------------
def mailboxes_purge(*, now: datetime | None = None, batch_size: int = 1000) -> int:
    """Delete mailboxes that ended more than RELAY_RETENTION_DAYS ago, with their mail, in
    batches. Their addresses stay reserved (AddressReservation is never purged), and a
    mailbox whose cleanup is still owed or dead is kept until that is settled."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.RELAY_RETENTION_DAYS)
    ended = (Q(status=MailboxStatus.EXPIRED, expired_at__lt=cutoff) | Q(status=MailboxStatus.DELETED, deleted_at__lt=cutoff))
    settled = Q(cleanup_state__in=[CleanupState.NONE, CleanupState.DONE])
    purged = 0
    while True:
        ids = list(Mailbox.objects.filter(ended & settled).values_list("id", flat=True)[:batch_size])
        if not ids:
            break
        with transaction.atomic():
            Message.objects.filter(mailbox_id__in=ids).delete()
            Mailbox.objects.filter(id__in=ids).delete()
        purged += len(ids)
    if purged:
        logger.info("purged %d mailbox(es) past retention", purged)
    return purged
