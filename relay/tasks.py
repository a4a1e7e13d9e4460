from celery import shared_task
from django.conf import settings

from relay import outbound


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
