"""The cleanup of one mailbox: deprovision it on the mail backend, once.

A task runs the cleanup only after a compare-and-set from `pending` to `running` under
a fresh claim: a duplicate message, a redelivery or a second worker finds nothing to
take and stops. The outcome is recorded only by the runner still holding that claim.
The attempt count lives in the row, where no lost message can reset it."""
import logging
import uuid
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from mailboxes.ending import cleanup_lease_until, mailboxes_expire_due
from mailboxes.signals import event_happened
from mailboxes.models import CleanupState, Mailbox, MailboxStatus
from relay.backends import NoBackendSlot, PermanentBackendError, TransientBackendError, get_backend

logger = logging.getLogger(__name__)

# A task scheduled for a mailbox's expires_at may fire up to this long before it (timer
# resolution, clock skew between the beat and the worker); it then comes back.
EARLY_WINDOW = timedelta(seconds=1)


class CleanupOutcome(StrEnum):
    SKIPPED = "skipped"  # not due, done, dead, or running elsewhere: nothing done
    EARLY = "early"  # a scheduled task that ran a moment before its mailbox was due
    DONE = "done"
    DEAD = "dead"


def cleanup_attempt_limit() -> int:
    return settings.RELAY_CLEANUP_MAX_RETRIES + 1


def mailbox_cleanup(*, mailbox_id, retry_wait_max_seconds: float) -> CleanupOutcome:
    """Deprovision one mailbox, if its cleanup is pending and nobody else runs it.

    Raises TransientBackendError when attempts remain and the caller should retry; the
    row then stays pending, leased for `retry_wait_max_seconds` more, the longest the
    retry may wait. Anything else the backend raises is recorded and re-raised: the task
    fails, the lease lapses, and a sweep tries again, each try counted, until the
    cleanup is dead."""
    now = timezone.now()
    claim = uuid.uuid4()
    mailbox = _claim_cleanup(mailbox_id, claim=claim, now=now)
    # A task queued before the mailbox was due expires it itself once it is.
    if mailbox is None and mailboxes_expire_due(mailbox_ids=[mailbox_id], now=now, publish=False):
        mailbox = _claim_cleanup(mailbox_id, claim=claim, now=now)
    if mailbox is None:
        logger.debug("cleanup of %s: nothing to take (not due, done, dead, or running elsewhere)", mailbox_id)
        if Mailbox.objects.filter(id=mailbox_id, status=MailboxStatus.ACTIVE, expires_at__gt=now,
                                  expiry_scheduled_for=F("expires_at"), expires_at__lte=now + EARLY_WINDOW).exists():
            return CleanupOutcome.EARLY
        return CleanupOutcome.SKIPPED
    limit = cleanup_attempt_limit()

    if mailbox.cleanup_attempts > limit:
        # Earlier attempts ended without an outcome (their worker died mid-call): a
        # poison pill. Park it rather than let it take workers down forever.
        _record_outcome(mailbox_id, claim, CleanupState.DEAD, error=mailbox.cleanup_last_error or
                        f"{mailbox.cleanup_attempts - 1} attempts ended without an outcome")
        return CleanupOutcome.DEAD

    try:
        get_backend().deprovision(mailbox)
    except NoBackendSlot:
        # Not an attempt: no call was made. Back to pending with the attempt given back,
        # leased past the task's return, which the caller schedules.
        Mailbox.objects.filter(id=mailbox_id, cleanup_state=CleanupState.RUNNING, cleanup_claim=claim).update(
            cleanup_state=CleanupState.PENDING, cleanup_attempts=F("cleanup_attempts") - 1,
            cleanup_lease_until=cleanup_lease_until(timezone.now(), extra_seconds=retry_wait_max_seconds))
        raise
    except TransientBackendError as exc:
        if mailbox.cleanup_attempts >= limit:
            _record_outcome(mailbox_id, claim, CleanupState.DEAD, error=str(exc))
            return CleanupOutcome.DEAD
        # Back to pending for the retry about to be scheduled, leased past its longest
        # possible wait so a sweep does not queue a second copy meanwhile.
        failed_at = timezone.now()
        Mailbox.objects.filter(id=mailbox_id, cleanup_state=CleanupState.RUNNING, cleanup_claim=claim).update(
            cleanup_state=CleanupState.PENDING,
            cleanup_last_error=str(exc)[:2000],
            cleanup_queued_at=failed_at,
            cleanup_lease_until=cleanup_lease_until(
                failed_at, extra_seconds=max(retry_wait_max_seconds, exc.retry_after or 0)),
        )
        logger.warning("cleanup of %s failed (attempt %d of %d), will retry: %s",
                       mailbox.address, mailbox.cleanup_attempts, limit, exc)
        raise
    except PermanentBackendError as exc:
        _record_outcome(mailbox_id, claim, CleanupState.DEAD, error=str(exc))
        return CleanupOutcome.DEAD
    except Exception as exc:
        Mailbox.objects.filter(id=mailbox_id, cleanup_state=CleanupState.RUNNING, cleanup_claim=claim).update(
            cleanup_last_error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    _record_outcome(mailbox_id, claim, CleanupState.DONE)
    return CleanupOutcome.DONE


def _claim_cleanup(mailbox_id, *, claim: uuid.UUID, now: datetime) -> Mailbox | None:
    """Move a pending cleanup to running under `claim` (the compare-and-set that makes
    one worker the runner) and return the row, or None if it was not pending.

    One statement with RETURNING, where update() plus a read would be two: this is the
    hot path of every expire task (bench/expiry_burst.py)."""
    fields = {f.name: f for f in Mailbox._meta.concrete_fields}
    prep = lambda name, value: fields[name].get_db_prep_value(value, connection)  # noqa: E731
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Mailbox._meta.db_table} SET cleanup_state = %s, cleanup_claim = %s, cleanup_lease_until = %s,"
            " cleanup_attempts = cleanup_attempts + 1 WHERE id = %s AND cleanup_state = %s"
            " RETURNING address, backend_id, cleanup_attempts, cleanup_last_error",
            [CleanupState.RUNNING, prep("cleanup_claim", claim), prep("cleanup_lease_until", cleanup_lease_until(now)),
             prep("id", mailbox_id), CleanupState.PENDING],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    address, backend_id, attempts, last_error = row
    return Mailbox(id=mailbox_id, address=address, backend_id=backend_id, cleanup_attempts=attempts,
                   cleanup_last_error=last_error)


def _record_outcome(mailbox_id, claim: uuid.UUID, state: CleanupState, *, error: str = "") -> None:
    changes = {"cleanup_state": state, "cleanup_lease_until": None, "cleanup_claim": None}
    if state == CleanupState.DONE:
        changes["cleanup_done_at"] = timezone.now()
    elif state == CleanupState.DEAD:
        changes["cleanup_dead_at"] = timezone.now()
    if error:
        changes["cleanup_last_error"] = error[:2000]
    # Only the runner still holding the cleanup records the outcome: if its lease lapsed
    # mid-call and a sweep handed the cleanup to another task, that one's outcome counts.
    with transaction.atomic():
        recorded = Mailbox.objects.filter(id=mailbox_id, cleanup_state=CleanupState.RUNNING,
                                          cleanup_claim=claim).update(**changes)
        if recorded and state == CleanupState.DEAD:
            event_happened.send(sender=Mailbox, event="cleanup.dead", mailbox_id=mailbox_id)
    if state == CleanupState.DEAD:
        logger.error("cleanup of %s is a dead letter: %s", mailbox_id, error)
    else:
        logger.info("cleanup of %s done", mailbox_id)
