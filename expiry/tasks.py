"""Celery tasks of the expiry engine. Thin: ids in, one service call, nothing more."""
import uuid

from celery import shared_task
from django.conf import settings

from domains.services import claims_purge_lapsed
from expiry import cleanup, purge, sweep as sweeping
from mailboxes.models import CLEANUPS
from relay.backends import NoBackendSlot, TransientBackendError

# The cleanup's lease must outlive the task: if the hard time limit could exceed the
# lease, a sweep might hand the cleanup to a second worker while the first still runs.
_LEASE = settings.RELAY_CLEANUP_LEASE_SECONDS


# Transient errors are retried by Celery with full-jitter backoff, owed/'s formula.
@shared_task(bind=True, acks_late=True, autoretry_for=(TransientBackendError,),
             retry_backoff=settings.RELAY_CLEANUP_RETRY_BACKOFF_SECONDS,
             retry_backoff_max=settings.RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS, retry_jitter=True,
             max_retries=settings.RELAY_CLEANUP_MAX_RETRIES, soft_time_limit=_LEASE // 2, time_limit=_LEASE * 3 // 4)
def expire_mailbox(self, mailbox_id: str) -> str:
    """Deprovision one ended mailbox (expiry.cleanup.mailbox_cleanup). No slot under the
    backend's limit is a wait, not a retry: a fresh task comes back later."""
    retries = self.request.retries
    try:
        outcome = cleanup.mailbox_cleanup(mailbox_id=uuid.UUID(mailbox_id), retries=retries)
    except NoBackendSlot as exc:
        self.apply_async(args=(mailbox_id,), countdown=exc.retry_after)
        return "waiting"
    except TransientBackendError as exc:
        # The row was released for this retry, leased for its longest wait (owed/).
        if not exc.retry_after:
            raise  # autoretry_for: retry_backoff with retry_jitter
        raise self.retry(exc=exc, countdown=CLEANUPS.retry_delay(retries, at_least=exc.retry_after))
    if outcome == cleanup.CleanupOutcome.EARLY:
        self.apply_async(args=(mailbox_id,), countdown=cleanup.EARLY_RETRY_SECONDS)
    return outcome.value


@shared_task(acks_late=True, soft_time_limit=_LEASE // 2, time_limit=_LEASE * 3 // 4)
def expire_mailboxes(mailbox_ids: list[str], expire_due: bool = False) -> dict:
    """A batch of cleanups where a deprovision calls no server (expiry.cleanup.mailboxes_cleanup)."""
    return cleanup.mailboxes_cleanup(mailbox_ids=[uuid.UUID(mailbox_id) for mailbox_id in mailbox_ids],
                                     expire_due=expire_due)


# No `expires`: a worker whose clock runs fast would judge every sweep message expired.
# Sweeps that queued up while no worker ran cost a few queries each once one does.
@shared_task(acks_late=True, soft_time_limit=300, time_limit=330)
def sweep() -> dict:
    """Beat's sweep: expire what is due, requeue lapsed work, schedule what falls due
    soon. Safe to overlap."""
    result = sweeping.sweep_due_and_lapsed()
    scheduled = sweeping.schedule_upcoming() if settings.RELAY_EXPIRY_SCHEDULE_AHEAD else 0
    return {"expired": result.expired, "requeued": result.requeued, "abandoned": result.abandoned,
            "scheduled": scheduled}


@shared_task(acks_late=True)
def purge_retained() -> int:
    """Daily: delete mailboxes past RELAY_RETENTION_DAYS, keeping their addresses reserved,
    and domain claims that lapsed unverified."""
    claims_purge_lapsed()
    return purge.mailboxes_purge()
