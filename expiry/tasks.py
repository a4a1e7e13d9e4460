"""Celery tasks of the expiry engine. Thin: ids in, one service call, nothing more."""
import uuid

from celery import shared_task
from django.conf import settings

from expiry import services
from relay.backends import TransientBackendError


# The cleanup's lease must outlive the task: if the hard time limit could exceed the
# lease, a sweep might hand the cleanup to a second worker while the first still runs.
_LEASE = settings.RELAY_CLEANUP_LEASE_SECONDS


@shared_task(
    bind=True,
    acks_late=True,
    autoretry_for=(TransientBackendError,),
    max_retries=settings.RELAY_CLEANUP_MAX_RETRIES,
    retry_backoff=settings.RELAY_CLEANUP_RETRY_BACKOFF_SECONDS,
    retry_backoff_max=settings.RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS,
    retry_jitter=True,
    soft_time_limit=_LEASE // 2,
    time_limit=_LEASE * 3 // 4,
)
def expire_mailbox(self, mailbox_id: str) -> str:
    """Deprovision one expired or deleted mailbox; see expiry.services.mailbox_cleanup."""
    outcome = services.mailbox_cleanup(
        mailbox_id=uuid.UUID(mailbox_id),
        final_attempt=self.request.retries >= self.max_retries,
        retry_wait_max_seconds=services.retry_wait_max_seconds(self.request.retries),
    )
    if outcome == services.CleanupOutcome.EARLY:
        # Timers may fire a hair before the due instant; come back in a moment.
        self.apply_async(args=(mailbox_id,), countdown=0.05)
    return outcome.value


# A sweep message older than two intervals is dropped: a newer one is already queued.
@shared_task(acks_late=True, soft_time_limit=300, time_limit=330, expires=settings.RELAY_SWEEP_INTERVAL_SECONDS * 2)
def sweep() -> dict:
    """Beat's sweep: expire what is due, requeue lapsed cleanups. Safe to overlap."""
    result = services.cleanup_sweep()
    return {"expired": result.expired, "requeued": result.requeued}


@shared_task(acks_late=True)
def purge_retained() -> int:
    """Daily: delete mailboxes past RELAY_RETENTION_DAYS, keeping their addresses reserved."""
    return services.mailboxes_purge()
