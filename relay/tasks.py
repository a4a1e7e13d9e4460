import logging

from celery import shared_task
from django.conf import settings

from relay import outbound
from relay.backends import NothingToReconcile
from relay.reconcile import orphans_find

logger = logging.getLogger(__name__)


@shared_task(
    acks_late=True,
    autoretry_for=(outbound.RetryableSendError,),
    max_retries=settings.RELAY_SEND_MAX_RETRIES,
    retry_backoff=settings.RELAY_SEND_RETRY_BACKOFF_SECONDS,
    retry_backoff_max=300,
    retry_jitter=True,
)
def send_outbound(outbound_id: int) -> str:
    """Send one outbound message; see relay.outbound.outbound_send."""
    return outbound.outbound_send(outbound_id=outbound_id)


@shared_task(acks_late=True, soft_time_limit=3000, time_limit=3300)
def reconcile_report() -> int:
    """Daily: count the backend's accounts that no live mailbox owns, and say so in the
    log. Only reports: destroying them is the operator's call (`manage.py reconcile
    --destroy`)."""
    try:
        orphans = orphans_find(domains=settings.RELAY_DOMAINS)
    except NothingToReconcile:
        return 0
    if orphans:
        logger.warning(
            "%d backend account(s) are owned by no live mailbox; `manage.py reconcile` lists them, "
            "`--destroy` removes them", len(orphans))
    return len(orphans)
