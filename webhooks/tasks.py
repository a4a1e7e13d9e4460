import logging

from celery import shared_task
from django.conf import settings

from webhooks import delivery

logger = logging.getLogger(__name__)


def publish_quietly(task, delivery_ids) -> None:
    """Queue a task per delivery. A publish that fails loses nothing: the delivery's
    lease lapses and the sweep queues it again."""
    for delivery_id in delivery_ids:
        try:
            task.delay(delivery_id)
        except Exception:
            logger.exception("could not queue webhook delivery %s; the sweep will after its lease", delivery_id)


@shared_task(bind=True, acks_late=True, max_retries=settings.RELAY_WEBHOOK_MAX_RETRIES)
def deliver_webhook(self, delivery_id: int) -> str:
    """One attempt at a webhook delivery; see webhooks.delivery.deliver."""
    try:
        return delivery.deliver(delivery_id=delivery_id)
    except delivery.RetryableDelivery as exc:
        # The row was released for this retry, leased for its longest wait (owed/).
        raise self.retry(exc=exc, countdown=delivery.DELIVERIES.retry_delay(self.request.retries))


@shared_task(acks_late=True)
def sweep_deliveries() -> int:
    """Beat, every RELAY_SWEEP_INTERVAL_SECONDS: queue again the deliveries whose task was lost."""
    ids = delivery.lapsed_requeue()
    if ids:
        logger.warning("queued %d webhook delivery(ies) again after their lease lapsed", len(ids))
        publish_quietly(deliver_webhook, ids)
    return len(ids)
