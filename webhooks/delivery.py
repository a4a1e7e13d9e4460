"""Delivering a webhook event: take the row, POST the signed body, record the outcome
(docs/api.md, "Webhooks": 2xx delivered, 408/429/5xx retried, 410 disables, else failed)."""
import json
import logging
import time
import uuid

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.db.models.functions import Now

from core import task_names
from core.clock import db_now
from core.storage import commit_unflushed
from owed import OwedWork
from webhooks import signing
from webhooks.models import DeliveryStatus, Webhook, WebhookDelivery
from core.http import DeliveryTimedOut, PrivateAddress, TransportFailed, post

logger = logging.getLogger(__name__)

RETRY_STATUSES = {408, 429}


class RetryableDelivery(Exception):
    """The receiver could not take it now; a later attempt may."""


# A delivery is owed work (owed/, docs/architecture.md). It has no running state: a run
# holds a pending delivery by its claim, until its lease lapses.
DELIVERIES = OwedWork(
    model=WebhookDelivery, state="status",
    owed=DeliveryStatus.PENDING, running=DeliveryStatus.PENDING, dead=DeliveryStatus.FAILED,
    max_retries_setting="RELAY_WEBHOOK_MAX_RETRIES", backoff_setting="RELAY_WEBHOOK_RETRY_BACKOFF_SECONDS",
    backoff_max_setting="RELAY_WEBHOOK_RETRY_BACKOFF_MAX_SECONDS", lease_setting="RELAY_WEBHOOK_RUN_LEASE_SECONDS",
)


def deliver(*, delivery_id: int) -> str:
    """One attempt at delivery `delivery_id`. Returns its outcome; raises
    RetryableDelivery when a later attempt should be made."""
    taken = DELIVERIES.take_one(delivery_id)
    if taken is None:
        return "skipped"
    claim, _ = taken
    delivery = WebhookDelivery.objects.select_related("webhook").get(id=delivery_id)
    status_code, error = _attempt(delivery, claim)
    if status_code is None and error is None:
        return "failed"
    return _record(delivery, claim, status_code, error)


# Deliveries one batch task carries at most (deliver_many).
BATCH = 50
DELIVER_TASK = task_names.DELIVER_WEBHOOK


def deliver_many(*, delivery_ids: list[int]) -> dict[str, int]:
    """One attempt at each of these deliveries to one receiver: one claim, sent in turn, the
    delivered settled in one statement (not synchronously committed: a lost one is sent again)."""
    claim, taken = DELIVERIES.take_batch(WebhookDelivery.objects.filter(DELIVERIES.free_to_take(db_now()),
                                                                        id__in=delivery_ids).order_by("id"),
                                         limit=len(delivery_ids))
    _queue_skipped(set(delivery_ids) - set(taken))
    if len(taken) > 1:  # sent one after another: each may take its whole deadline
        DELIVERIES.extend_lease(taken, claim, seconds=DELIVERIES.lease_seconds()
                        + settings.RELAY_WEBHOOK_TIMEOUT_SECONDS * (len(taken) - 1))
    counted = {"delivered": 0, "failed": 0, "retrying": 0}
    delivered: dict[int, list[WebhookDelivery]] = {}  # by status code
    for delivery in WebhookDelivery.objects.select_related("webhook").filter(id__in=taken).order_by("id"):
        status_code, error = _attempt(delivery, claim)
        if status_code is None and error is None:
            counted["failed"] += 1
            continue
        if status_code is None or not 200 <= status_code < 300:
            try:
                counted[_record(delivery, claim, status_code, error)] += 1
            except RetryableDelivery:
                counted["retrying"] += 1
                # Sent by name: webhooks.tasks imports this module.
                current_app.send_task(DELIVER_TASK, args=(delivery.id,),
                                      countdown=DELIVERIES.retry_delay(delivery.attempts - 1))
            continue
        delivered.setdefault(status_code, []).append(delivery)
    if delivered:
        with transaction.atomic():
            commit_unflushed()  # a lost outcome lapses and is sent again
            for status_code, deliveries in delivered.items():
                counted["delivered"] += DELIVERIES.settle(
                    [d.id for d in deliveries], claim, state=DeliveryStatus.DELIVERED, delivered_at=Now(),
                    last_status_code=status_code, error="")
        for delivery in (d for deliveries in delivered.values() for d in deliveries):
            logger.info("delivered %s %s to webhook %s", delivery.event, delivery.message_id, delivery.webhook_id)
    return counted


def _queue_skipped(delivery_ids: set) -> None:
    """A row another transaction held when the batch took, if still owed, goes to a task of
    its own rather than waiting out its lease."""
    skipped = list(WebhookDelivery.objects.filter(DELIVERIES.free_to_take(db_now()), id__in=delivery_ids)
                   .values_list("id", flat=True)) if delivery_ids else []
    for delivery_id in skipped:
        current_app.send_task(DELIVER_TASK, args=(delivery_id,))
    if skipped:
        logger.info("%d webhook delivery(ies) held by another transaction when a batch took; queued on their own",
                    len(skipped))


def _attempt(delivery: WebhookDelivery, claim: uuid.UUID) -> tuple[int | None, str | None]:
    """POST one taken delivery under every guard: (status code, error). (None, None): it
    was not sent, and is a dead letter already (its webhook disabled, its attempts spent)."""
    webhook = delivery.webhook
    if webhook.disabled_at is not None:
        DELIVERIES.dead_letter(delivery.id, claim, error=f"the webhook is disabled: {webhook.disabled_reason}")
        return None, None
    if DELIVERIES.past_last_attempt(delivery.attempts):
        DELIVERIES.dead_letter(delivery.id, claim, error="gave up: the worker running the last attempt was lost")
        return None, None
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    status_code, error = None, ""
    try:
        # Standard Webhooks: the receiver checks it against its own clock, as it would any sender's.
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
    return status_code, error


def _record(delivery: WebhookDelivery, claim: uuid.UUID, status_code: int | None, error: str) -> str:
    if status_code is not None and 200 <= status_code < 300:
        DELIVERIES.settle(delivery.id, claim, state=DeliveryStatus.DELIVERED, delivered_at=Now(),
                          last_status_code=status_code, error="")
        logger.info("delivered %s %s to webhook %s", delivery.event, delivery.message_id, delivery.webhook_id)
        return "delivered"
    if status_code == 410:
        Webhook.objects.filter(id=delivery.webhook_id, disabled_at=None).update(
            disabled_at=db_now(), disabled_reason="the receiver answered 410 Gone")
        logger.warning("webhook %s answered 410 Gone: disabled", delivery.webhook_id)
    retryable = not error.startswith("refused:") and (
        status_code is None or status_code in RETRY_STATUSES or status_code >= 500)
    attempts = delivery.attempts  # read after the take counted this attempt
    if retryable and DELIVERIES.has_retry_left(attempts):
        # Released for the retry, and leased for as long as the retry may wait: a retry the
        # broker loses lapses back to the sweep.
        DELIVERIES.release(delivery.id, claim, error=error, last_status_code=status_code,
                           hold_seconds=DELIVERIES.longest_retry_wait(attempts - 1)
                           + settings.RELAY_WEBHOOK_LEASE_SECONDS)
        logger.warning("webhook delivery %s failed (attempt %d), will retry: %s", delivery.id, attempts, error)
        raise RetryableDelivery(error)
    DELIVERIES.dead_letter(delivery.id, claim, error=error, last_status_code=status_code)
    logger.error("webhook delivery %s failed for good (a dead letter in the admin): %s", delivery.id, error)
    return "failed"


def lapsed_requeue(*, limit: int = 500) -> list[int]:
    """The sweep's safety net: pending deliveries whose lease lapsed (their task was lost
    with a worker or a broker) get a fresh lease; the caller queues them again."""
    # A delivery whose every attempt was lost with its worker (a receiver that kills the
    # worker, say) is not tried for ever: past its attempts it is a dead letter.
    gave_up = DELIVERIES.give_up_lapsed(error="gave up: the worker running the last attempt was lost")
    if gave_up:
        logger.error("%d webhook delivery(ies) failed for good after their last attempt was lost", gave_up)
    now = db_now()
    ids = list(WebhookDelivery.objects.filter(DELIVERIES.lapsed(now)).values_list("id", flat=True)[:limit])
    return DELIVERIES.requeue_lapsed(ids, now, owed_lease=DELIVERIES.lease(seconds=settings.RELAY_WEBHOOK_LEASE_SECONDS))


def deliveries_redeliver(*, delivery_ids) -> list[int]:
    """The admin's redeliver: failed deliveries owed again, with a fresh set of attempts."""
    return DELIVERIES.requeue(delivery_ids, lease_until=DELIVERIES.lease(seconds=settings.RELAY_WEBHOOK_LEASE_SECONDS))


def delivery_counts() -> dict[str, int]:
    """Deliveries by status, for the operator (/metrics, the admin's first screen)."""
    return dict(WebhookDelivery.objects.order_by().values_list("status").annotate(n=Count("id")))
