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


def publish_by_receiver(deliveries: list[tuple[int, int]]) -> None:
    """Queue new deliveries (webhook id, delivery id): those to one webhook together, up to
    delivery.BATCH a task."""
    by_webhook: dict[int, list[int]] = {}
    for webhook_id, delivery_id in deliveries:
        by_webhook.setdefault(webhook_id, []).append(delivery_id)
    for ids in by_webhook.values():
        for start in range(0, len(ids), delivery.BATCH):
            batch = ids[start:start + delivery.BATCH]
            if len(batch) == 1:
                publish_quietly(deliver_webhook, batch)
                continue
            try:
                deliver_webhooks.delay(batch)
            except Exception:
                logger.exception("could not queue %d webhook deliveries; the sweep will after their lease", len(batch))


@shared_task(bind=True, acks_late=True, max_retries=settings.RELAY_WEBHOOK_MAX_RETRIES)
def deliver_webhook(self, delivery_id: int) -> str:
    """One attempt at a webhook delivery; see webhooks.delivery.deliver."""
    try:
        return delivery.deliver(delivery_id=delivery_id)
    except delivery.RetryableDelivery as exc:
        # The row was released for this retry, leased for its longest wait (owed/).
        raise self.retry(exc=exc, countdown=delivery.DELIVERIES.retry_delay(self.request.retries))


@shared_task(acks_late=True, soft_time_limit=settings.RELAY_WEBHOOK_TIMEOUT_SECONDS * (delivery.BATCH + 2),
             time_limit=settings.RELAY_WEBHOOK_TIMEOUT_SECONDS * (delivery.BATCH + 3))
def deliver_webhooks(delivery_ids: list[int]) -> dict:
    """One attempt at each of a batch of deliveries to one receiver (webhooks.delivery.deliver_many)."""
    return delivery.deliver_many(delivery_ids=delivery_ids)


@shared_task(acks_late=True)
def sweep_deliveries() -> int:
    """Beat, every RELAY_SWEEP_INTERVAL_SECONDS: queue again the deliveries whose task was lost."""
    ids = delivery.lapsed_requeue()
    if ids:
        logger.warning("queued %d webhook delivery(ies) again after their lease lapsed", len(ids))
        publish_quietly(deliver_webhook, ids)
    return len(ids)
