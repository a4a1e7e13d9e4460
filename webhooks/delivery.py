"""Delivering one webhook event: claim the row (a compare-and-set, so a duplicate task
finds nothing), POST the signed body, record the outcome.

- 2xx: delivered.
- Timeouts, connection errors, 408, 429 and 5xx: retried with backoff, the same
  `webhook-id` each time, until RELAY_WEBHOOK_MAX_RETRIES retries are spent; then failed.
- 410 Gone: failed, and the webhook is disabled.
- Any other status (4xx, and 3xx: redirects are not followed): failed at once.

A failed delivery is a dead letter an operator redelivers from the admin. The HTTP call
and its guards (one deadline, the checked address pinned, no redirect, no body kept) are
webhooks.transport's. A delivery's stored error names the status, never the answer's
body: the body of a receiver is the receiver owner's business, not ours to pass on."""
import json
import logging
import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, F, Q
from django.utils import timezone

from webhooks import signing
from webhooks.models import DeliveryStatus, Webhook, WebhookDelivery
from webhooks.transport import DeliveryTimedOut, PrivateAddress, TransportFailed, post

logger = logging.getLogger(__name__)

RETRY_STATUSES = {408, 429}


class RetryableDelivery(Exception):
    """The receiver could not take it now; a later attempt may."""


def _lease(seconds: float) -> "timezone.datetime":
    return timezone.now() + timedelta(seconds=seconds)


def _claim(delivery_id: int) -> uuid.UUID | None:
    """Take the delivery for this run, counting the attempt; None if it is not owed, or
    another run holds it (its claim is set and its lease has not lapsed)."""
    claim = uuid.uuid4()
    now = timezone.now()
    taken = WebhookDelivery.objects.filter(
        Q(claim=None) | Q(lease_until__lte=now), id=delivery_id, status=DeliveryStatus.PENDING,
    ).update(claim=claim, lease_until=_lease(settings.RELAY_WEBHOOK_TIMEOUT_SECONDS * 2 + 30),
             attempts=F("attempts") + 1)
    return claim if taken else None


def _finish(delivery_id: int, held_by: uuid.UUID, **changes) -> None:
    """Write an outcome, if this run still holds the delivery (a run whose lease lapsed
    mid-call loses it to the one the sweep queued)."""
    WebhookDelivery.objects.filter(id=delivery_id, claim=held_by).update(**changes)


def deliver(*, delivery_id: int) -> str:
    """One attempt at delivery `delivery_id`. Returns its outcome; raises
    RetryableDelivery when a later attempt should be made."""
    claim = _claim(delivery_id)
    if claim is None:
        return "skipped"
    delivery = WebhookDelivery.objects.select_related("webhook").get(id=delivery_id)
    webhook = delivery.webhook
    if webhook.disabled_at is not None:
        _finish(delivery_id, claim, status=DeliveryStatus.FAILED, claim=None, lease_until=None,
                last_error=f"the webhook is disabled: {webhook.disabled_reason}")
        return "failed"
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    status_code, error = None, ""
    try:
        timestamp = int(time.time())
        status_code = post(webhook.url, body, {
            "Content-Type": "application/json", "User-Agent": "Relay-Webhooks", "webhook-id": delivery.message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signing.sign(webhook.secret, delivery.message_id, timestamp, body)})
        error = "" if 200 <= status_code < 300 else f"HTTP {status_code}"
    except PrivateAddress as exc:
        error = f"refused: {exc}"
    except DeliveryTimedOut as exc:
        error = f"timed out: {exc}"
    except TransportFailed as exc:
        error = str(exc)
    return _record(delivery, claim, status_code, error)


def _record(delivery: WebhookDelivery, claim: uuid.UUID, status_code: int | None, error: str) -> str:
    common = {"last_status_code": status_code, "last_error": error}
    if status_code is not None and 200 <= status_code < 300:
        _finish(delivery.id, claim, status=DeliveryStatus.DELIVERED, delivered_at=timezone.now(), claim=None,
                lease_until=None, **common)
        logger.info("delivered %s %s to webhook %s", delivery.event, delivery.message_id, delivery.webhook_id)
        return "delivered"
    if status_code == 410:
        Webhook.objects.filter(id=delivery.webhook_id, disabled_at=None).update(
            disabled_at=timezone.now(), disabled_reason="the receiver answered 410 Gone")
        logger.warning("webhook %s answered 410 Gone: disabled", delivery.webhook_id)
    retryable = not error.startswith("refused:") and (
        status_code is None or status_code in RETRY_STATUSES or status_code >= 500)
    attempts = delivery.attempts  # read after the claim counted this attempt
    if retryable and attempts <= settings.RELAY_WEBHOOK_MAX_RETRIES:
        # Released for the retry, and leased for as long as the retry may wait: a retry the
        # broker loses lapses back to the sweep.
        _finish(delivery.id, claim, claim=None, lease_until=_lease(settings.RELAY_WEBHOOK_RETRY_BACKOFF_MAX_SECONDS
                                                                    + settings.RELAY_WEBHOOK_LEASE_SECONDS), **common)
        logger.warning("webhook delivery %s failed (attempt %d), will retry: %s", delivery.id, attempts, error)
        raise RetryableDelivery(error)
    _finish(delivery.id, claim, status=DeliveryStatus.FAILED, claim=None, lease_until=None, **common)
    logger.error("webhook delivery %s failed for good (a dead letter in the admin): %s", delivery.id, error)
    return "failed"


def lapsed_requeue(*, limit: int = 500) -> list[int]:
    """The sweep's safety net: pending deliveries whose lease lapsed (their task was lost
    with a worker or a broker) get a fresh lease; the caller queues them again."""
    now = timezone.now()
    lapsed = WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, lease_until__lte=now)
    # A delivery whose every attempt was lost with its worker (a receiver that kills the
    # worker, say) is not tried for ever: past its attempts it is a dead letter.
    gave_up = lapsed.filter(attempts__gt=settings.RELAY_WEBHOOK_MAX_RETRIES).update(
        status=DeliveryStatus.FAILED, claim=None, lease_until=None,
        last_error="gave up: the worker running the last attempt was lost")
    if gave_up:
        logger.error("%d webhook delivery(ies) failed for good after their last attempt was lost", gave_up)
    ids = list(lapsed.values_list("id", flat=True)[:limit])
    if ids:
        WebhookDelivery.objects.filter(id__in=ids, status=DeliveryStatus.PENDING, lease_until__lte=now).update(
            claim=None, lease_until=_lease(settings.RELAY_WEBHOOK_LEASE_SECONDS))
    return ids


def deliveries_redeliver(*, delivery_ids) -> list[int]:
    """The admin's redeliver: failed deliveries owed again, with a fresh set of attempts."""
    ids = list(WebhookDelivery.objects.filter(id__in=delivery_ids, status=DeliveryStatus.FAILED)
               .values_list("id", flat=True))
    WebhookDelivery.objects.filter(id__in=ids).update(status=DeliveryStatus.PENDING, attempts=0, claim=None,
                                                      lease_until=_lease(settings.RELAY_WEBHOOK_LEASE_SECONDS))
    return ids


def delivery_counts() -> dict[str, int]:
    """Deliveries by status, for the operator (/metrics, the admin's first screen)."""
    return dict(WebhookDelivery.objects.order_by().values_list("status").annotate(n=Count("id")))
