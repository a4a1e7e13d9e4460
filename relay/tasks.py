from celery import shared_task
from django.conf import settings

from relay import services


@shared_task(
    bind=True,
    acks_late=True,
    autoretry_for=(services.RetryableSendError,),
    max_retries=settings.RELAY_SEND_MAX_RETRIES,
    retry_backoff=settings.RELAY_SEND_RETRY_BACKOFF_SECONDS,
    retry_backoff_max=300,
    retry_jitter=True,
)
def send_outbound(self, outbound_id: int) -> str:
    return services.outbound_send(outbound_id=outbound_id, final_attempt=self.request.retries >= self.max_retries)
