"""The cleanup of one mailbox: deprovision it on the mail backend once, as owed work
(mailboxes.models.CLEANUPS); and which Celery task runs which cleanup, and when, queued once
the transaction that ended the mailboxes commits (a failed publish is the sweep's to redo)."""
import logging
import time
import uuid
from datetime import datetime, timedelta
from enum import StrEnum

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from mailboxes.lifecycle import mailboxes_expire_due
from mailboxes.models import CLEANUPS, CleanupState, Mailbox, MailboxStatus
from mailboxes.signals import event_happened
from core.clock import db_now
from core import task_names
from relay import mailserver
from relay.backends import NoBackendSlot, PermanentBackendError, TransientBackendError, get_backend, keeps_accounts

logger = logging.getLogger(__name__)

# A task scheduled for a mailbox's expires_at may fire up to this long before it (timer
# resolution, clock skew between the beat and the worker); it then comes back.
EARLY_WINDOW = timedelta(seconds=1)
# ... and it comes back after this long: long enough to be past the due instant, short
# enough to add nothing a client could see.
EARLY_RETRY_SECONDS = 0.05


class CleanupOutcome(StrEnum):
    SKIPPED = "skipped"  # not due, done, dead, or running elsewhere: nothing done
    EARLY = "early"  # a scheduled task that ran a moment before its mailbox was due
    DONE = "done"
    DEAD = "dead"


def mailbox_cleanup(*, mailbox_id, retries: int = 0) -> CleanupOutcome:
    """Deprovision one mailbox if its cleanup is pending and nobody else runs it. Raises
    TransientBackendError to retry (the row leased past the retry's wait)."""
    taken = _take(mailbox_id)
    # A task queued before the mailbox was due expires it itself once it is.
    if taken is None and mailboxes_expire_due(mailbox_ids=[mailbox_id], announce=False):
        taken = _take(mailbox_id)
    if taken is None:
        now = db_now()
        logger.debug("cleanup of %s: nothing to take (not due, done, dead, or running elsewhere)", mailbox_id)
        if Mailbox.objects.receiving(now).filter(id=mailbox_id, expiry_scheduled_for=F("expires_at"),
                                                 expires_at__lte=now + EARLY_WINDOW).exists():
            return CleanupOutcome.EARLY
        return CleanupOutcome.SKIPPED
    claim, mailbox = taken

    if CLEANUPS.past_last_attempt(mailbox.cleanup_attempts):
        return _record_dead(mailbox_id, claim, mailbox.cleanup_last_error
                            or f"{mailbox.cleanup_attempts - 1} attempts ended without an outcome")
    hold_seconds = settings.RELAY_CLEANUP_LEASE_SECONDS + CLEANUPS.longest_retry_wait(retries)
    try:
        # Where the mail server holds the mail, what it delivered before the end and no
        # poll read yet is read now, before the account and its mail are gone.
        mailserver.read_before_removal(mailbox_id)
        get_backend().deprovision(mailbox)
    except NoBackendSlot:
        # Not an attempt: no call was made. The caller brings the task back later.
        CLEANUPS.release(mailbox_id, claim, hold_seconds=hold_seconds, give_back_attempt=True)
        raise
    except TransientBackendError as exc:
        if not CLEANUPS.has_retry_left(mailbox.cleanup_attempts):
            return _record_dead(mailbox_id, claim, str(exc))
        CLEANUPS.release(mailbox_id, claim, error=str(exc), cleanup_queued_at=db_now(),
                         hold_seconds=max(hold_seconds, settings.RELAY_CLEANUP_LEASE_SECONDS + (exc.retry_after or 0)))
        logger.warning("cleanup of %s failed (attempt %d of %d), will retry: %s",
                       mailbox.address, mailbox.cleanup_attempts, CLEANUPS.max_attempts(), exc)
        raise
    except PermanentBackendError as exc:
        return _record_dead(mailbox_id, claim, str(exc))
    except Exception as exc:
        CLEANUPS.settle(mailbox_id, claim, error=f"{type(exc).__name__}: {exc}")
        raise
    CLEANUPS.settle(mailbox_id, claim, state=CleanupState.DONE, cleanup_done_at=Now())
    logger.info("cleanup of %s done", mailbox_id)
    return CleanupOutcome.DONE


def mailboxes_cleanup(*, mailbox_ids: list, expire_due: bool = False) -> dict[str, int]:
    """A batch of cleanups where a deprovision calls no server: taken with one claim, each
    deprovisioned, the done settled in one statement, a failure settled alone."""
    now = db_now()
    if expire_due:
        mailboxes_expire_due(mailbox_ids=mailbox_ids, now=now, announce=False)
    claim, taken = CLEANUPS.take_batch(Mailbox.objects.filter(CLEANUPS.free_to_take(now), id__in=mailbox_ids)
                                       .order_by(), limit=len(mailbox_ids))
    _queue_left_over({uuid.UUID(str(mailbox_id)) for mailbox_id in mailbox_ids} - set(taken), now=now)
    outcome = {"done": 0, "dead": 0}
    if not taken:
        return outcome
    backend, done = get_backend(), []
    rows = Mailbox.objects.filter(id__in=taken).values_list("id", "address", "backend_id", "cleanup_attempts",
                                                             "cleanup_last_error")
    for mailbox_id, address, backend_id, attempts, last_error in rows:
        if CLEANUPS.past_last_attempt(attempts):
            _record_dead(mailbox_id, claim, last_error or f"{attempts - 1} attempts ended without an outcome")
            outcome["dead"] += 1
            continue
        try:
            backend.deprovision(Mailbox(id=mailbox_id, address=address, backend_id=backend_id))
        except PermanentBackendError as exc:
            _record_dead(mailbox_id, claim, str(exc))
            outcome["dead"] += 1
        except Exception as exc:
            # Not expected where nothing is called; whatever it was, the cleanup goes back
            # to one task of its own, with mailbox_cleanup's retries.
            CLEANUPS.release(mailbox_id, claim, error=f"{type(exc).__name__}: {exc}",
                             hold_seconds=settings.RELAY_CLEANUP_LEASE_SECONDS)
            publish_cleanups([mailbox_id], batch=1)
            logger.warning("cleanup of %s failed in a batch; queued on its own: %s", mailbox_id, exc)
        else:
            done.append(mailbox_id)
    outcome["done"] = CLEANUPS.settle(done, claim, state=CleanupState.DONE, cleanup_done_at=Now())
    if outcome["done"]:
        logger.info("cleanup of %d mailbox(es) done in one batch", outcome["done"])
    return outcome


def _queue_left_over(mailbox_ids: set, *, now) -> None:
    """What a batch did not take: those still pending are queued on their own, and mailboxes
    its timer reached a hair early come back at their instant."""
    if not mailbox_ids:
        return
    rows = Mailbox.objects.filter(id__in=mailbox_ids).filter(
        Q(cleanup_state=CleanupState.PENDING)
        | Q(status=MailboxStatus.ACTIVE, expiry_scheduled_for=F("expires_at"), expires_at__lte=now + EARLY_WINDOW))
    skipped, early = [], []
    for mailbox_id, state, expires_at in rows.values_list("id", "cleanup_state", "expires_at"):
        (skipped if state == CleanupState.PENDING else early).append((mailbox_id, expires_at))
    if skipped:
        publish_cleanups([mailbox_id for mailbox_id, _ in skipped], batch=1)
        logger.info("%d cleanup(s) held by another transaction when a batch took; queued on their own", len(skipped))
    if early:
        soon = now + timedelta(seconds=EARLY_RETRY_SECONDS)
        publish_cleanups([mailbox_id for mailbox_id, _ in early], etas=[max(at, soon) for _, at in early])


def _take(mailbox_id) -> tuple[uuid.UUID, Mailbox] | None:
    """Take a pending cleanup: its claim, and as much of the row as the backend needs."""
    taken = CLEANUPS.take_one(mailbox_id, returning=("address", "backend_id", "cleanup_last_error"))
    if taken is None:
        return None
    claim, fields = taken
    return claim, Mailbox(id=mailbox_id, **fields)


def _record_dead(mailbox_id, claim: uuid.UUID, error: str) -> CleanupOutcome:
    # Only the runner still holding the cleanup records the outcome: if its lease lapsed
    # mid-call and a sweep handed the cleanup to another task, that one's outcome counts.
    with transaction.atomic():
        if CLEANUPS.dead_letter(mailbox_id, claim, error=error, cleanup_dead_at=db_now()):
            event_happened.send(sender=Mailbox, event="cleanup.dead", mailbox_id=mailbox_id)
    logger.error("cleanup of %s is a dead letter: %s", mailbox_id, error)
    return CleanupOutcome.DEAD


# --- queued: which task runs which cleanup, and when ----------------------------------------------
# expiry/tasks.py imports this module: its tasks are sent by name.
EXPIRE_TASK = task_names.EXPIRE_MAILBOX
EXPIRE_BATCH_TASK = task_names.EXPIRE_MAILBOXES
# Cleanups one batch task runs where a deprovision calls no server.
CLEANUP_BATCH = 200
# Scheduled cleanups due within this span of the first share one task, run at the last
# one's instant: none runs early, none waits longer than this for the others.
SCHEDULED_BATCH_SPAN = timedelta(milliseconds=50)


def cleanups_per_task() -> int:
    """A batch where a deprovision calls no server, else one per task."""
    return 1 if keeps_accounts() else CLEANUP_BATCH


def publish_cleanups(mailbox_ids: list, *, etas: list[datetime] | None = None, batch: int | None = None) -> None:
    """Queue the expire tasks of these cleanups over one connection (`etas`: each at its
    mailboxes' due instant)."""
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
    """(ids, eta) per task, in the order they fall due: at most `batch` and at most
    SCHEDULED_BATCH_SPAN apart, to run at the last one's instant."""
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


def queue_cleanups_after_commit(mailbox_ids: list, *, not_before: datetime | None = None) -> None:
    """Queue these cleanups once the transaction commits: a worker must never look for a
    pending cleanup that is not in the database yet."""
    if mailbox_ids:
        ids = list(mailbox_ids)
        etas = [not_before] * len(ids) if not_before else None
        transaction.on_commit(lambda: publish_cleanups(ids, etas=etas))


def on_mailboxes_ended(sender, *, mailbox_ids: list, not_before: datetime | None = None, **kwargs) -> None:
    """The receiver of mailboxes.signals.mailboxes_ended (connected in apps.py)."""
    queue_cleanups_after_commit(mailbox_ids, not_before=not_before)


# A broker that cannot say how long a queue is gets one warning a minute, not one a sweep.
_QUEUE_LENGTH_WARN_EVERY_SECONDS = 60
_last_queue_length_warning = 0.0


def queue_length(name: str) -> int | None:
    """Messages waiting in queue `name` (0 when empty), or None when the broker cannot answer."""
    global _last_queue_length_warning
    try:
        with current_app.connection_for_read() as conn:
            # One try: a sweep must not wait out the reconnect backoff for a figure it can do without.
            conn.ensure_connection(max_retries=0)
            try:
                return conn.default_channel.queue_declare(queue=name, passive=True).message_count
            except conn.channel_errors:
                return 0
    except Exception:
        if time.monotonic() - _last_queue_length_warning > _QUEUE_LENGTH_WARN_EVERY_SECONDS:
            _last_queue_length_warning = time.monotonic()
            logger.warning("could not read the length of queue %s", name, exc_info=True)
        return None
