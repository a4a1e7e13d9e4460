"""Event subscriptions and their deliveries (docs/api.md).

A delivery is a row first, written in the transaction that causes its event; a Celery
task POSTs it, and the same lease-and-sweep net as cleanups and outbox mail catches a
task the broker lost (webhooks/delivery.py)."""
from django.db import models
from django.db.models import Q


class WebhookEvent(models.TextChoices):
    """What a webhook may subscribe to (docs/api.md); the labels say it for the admin."""

    MESSAGE_RECEIVED = "message.received", "a message was stored in the mailbox"
    MAILBOX_EXPIRED = "mailbox.expired", "the mailbox reached its expires_at"
    MAILBOX_DELETED = "mailbox.deleted", "the mailbox was deleted"
    CLEANUP_DEAD = "cleanup.dead", "the mailbox's cleanup on the backend was given up"
    MESSAGE_SENT = "message.sent", "the next hop accepted a sent message for a recipient"
    MESSAGE_DEFERRED = "message.deferred", "the next hop or a later one said to try again later"
    MESSAGE_FAILED = "message.failed", "the next hop refused a recipient, or the retries were spent"
    MESSAGE_BOUNCED = "message.bounced", "a bounce came back for a recipient"
    MESSAGE_COMPLAINED = "message.complained", "a recipient reported the message as spam"


class Webhook(models.Model):
    owner = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    events = models.JSONField()
    # Only this mailbox's events; null for all of the owner's mailboxes.
    mailbox = models.ForeignKey("mailboxes.Mailbox", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="webhooks")
    # The Standard Webhooks signing secret (whsec_…). Kept as is: signing needs it.
    secret = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when the receiver answered 410 Gone (or an operator turned it off): no more deliveries.
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["owner"], condition=Q(disabled_at=None), name="webhook_owner_enabled")]

    def __str__(self) -> str:
        return f"{self.url} ({', '.join(self.events)})"


class DeliveryStatus(models.TextChoices):
    """pending: owed (queued, running or waiting for a retry); delivered: a 2xx came
    back; failed: given up, a dead letter an operator can redeliver."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(models.Model):
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=32, choices=WebhookEvent.choices)
    # The body, fixed when the event happened; every attempt sends the same bytes and id.
    payload = models.JSONField()
    message_id = models.CharField(max_length=64, unique=True, help_text="The webhook-id header: msg_…")
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # Until then the queued or running task is trusted; after it, the sweep queues it again.
    lease_until = models.DateTimeField(null=True, blank=True)
    claim = models.UUIDField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(fields=["webhook", "-created_at"], name="delivery_webhook_list"),
            models.Index(fields=["lease_until"], condition=Q(status="pending"), name="delivery_pending_lease"),
            models.Index(fields=["status", "-created_at"], name="delivery_status"),
        ]
