"""The outbox: every mail Relay sends, a row written in the transaction that causes it."""
from django.db import models
from django.db.models import Q


class OutboxKind(models.TextChoices):
    """What the mail is. The order is the claim order: a person waiting to get back into
    their account comes first, a new account next, mailbox sends last."""

    RECOVERY = "recovery"
    SIGN_IN = "sign_in"
    ACTIVATION = "activation"
    SEND = "send"


# The claim order of each kind (lower first), stored on the row so that the claim's
# ORDER BY is an index scan.
KIND_PRIORITY = {OutboxKind.RECOVERY: 0, OutboxKind.SIGN_IN: 0, OutboxKind.ACTIVATION: 1, OutboxKind.SEND: 2}


class OutboxStatus(models.TextChoices):
    """queued, sending (a worker's until `lease_until`), sent, failed (a dead letter), or
    skipped (a token mail whose token could no longer be used)."""

    QUEUED = "queued"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"
    SKIPPED = "skipped"


class OutboxMail(models.Model):
    kind = models.CharField(max_length=10, choices=OutboxKind.choices, default=OutboxKind.SEND)
    priority = models.PositiveSmallIntegerField(default=KIND_PRIORITY[OutboxKind.SEND])
    # The mailbox a send comes from (its address is the From); null for token mails.
    mailbox = models.ForeignKey("mailboxes.Mailbox", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="outbound")
    # The token an activation or recovery mail carries: checked again just before sending.
    token = models.ForeignKey("accounts.Token", null=True, blank=True, on_delete=models.CASCADE,
                              related_name="mails")
    from_email = models.CharField(max_length=320, blank=True, default="")
    to = models.JSONField()
    # A send's other recipients: Cc is in the headers, Bcc only in the envelope.
    cc = models.JSONField(default=list, db_default=[], blank=True)
    bcc = models.JSONField(default=list, db_default=[], blank=True)
    subject = models.CharField(max_length=998)
    text = models.TextField()
    html = models.TextField(blank=True, default="")
    # The mail as it goes on the wire, built once (dropped with the text once a token mail left).
    message = models.BinaryField(blank=True, default=b"")
    status = models.CharField(max_length=8, choices=OutboxStatus.choices, default=OutboxStatus.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    # Set by each claim: which batch holds the row, since when, and until when that batch
    # is trusted to finish. A row whose lease lapsed is claimed again by any mailer.
    claim = models.UUIDField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # A send's copy in its mailbox (a message with direction "out"); null for token mails,
    # and once that message is deleted.
    kept_as = models.OneToOneField("mailboxes.Message", null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="outbox_mail")

    class Meta:
        db_table = "relay_outboxmail"
        verbose_name = "outbox mail"
        verbose_name_plural = "outbox"
        indexes = [
            models.Index(fields=["mailbox", "-created_at"], name="outbound_mailbox_list"),
            # The mailer's claim: queued rows in claim order; only they are in it.
            models.Index(fields=["priority", "id"], condition=Q(status="queued"), name="outbox_queued"),
            # The mailer's "batches whose lease lapsed".
            models.Index(fields=["lease_until"], condition=Q(status="sending"), name="outbox_sending_lease"),
            # Dead letters.
            models.Index(fields=["status", "-created_at"], name="outbox_status"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} mail {self.id} to {', '.join(self.to)}"

    def recipients(self) -> list[str]:
        """The envelope's: To, Cc and Bcc."""
        return [*self.to, *self.cc, *self.bcc]


class BackendCallSlot(models.Model):
    """One call to the mail backend, for the limiter without Redis: held until `hold_until`,
    counted in the minute from `started_at`."""

    token = models.CharField(max_length=32, primary_key=True)
    started_at = models.DateTimeField()
    # Cleared when the call ends. A killed worker never clears it: the slot comes back
    # when it passes.
    hold_until = models.DateTimeField(null=True)

    class Meta:
        indexes = [models.Index(fields=["started_at"], name="backend_slot_started")]


class DeliveryStatus(models.TextChoices):
    """What became of a sent message for one recipient (docs/delivery.md). sent, failed,
    bounced and complained are final; a bounce or a complaint may still follow `sent`."""

    QUEUED = "queued"
    SENT = "sent"  # the next hop answered 250
    DEFERRED = "deferred"  # a 4xx (or no answer): retried, the last answer kept
    FAILED = "failed"  # a 5xx from the next hop, or the retries spent
    BOUNCED = "bounced"  # a bounce came back
    COMPLAINED = "complained"  # a complaint (ARF) came back


FINAL_DELIVERY = (DeliveryStatus.SENT, DeliveryStatus.FAILED, DeliveryStatus.BOUNCED, DeliveryStatus.COMPLAINED)


class RecipientDelivery(models.Model):
    """One recipient of a sent message (To, Cc or Bcc), and the last thing known of it."""

    mail = models.ForeignKey(OutboxMail, on_delete=models.CASCADE, related_name="deliveries")
    recipient = models.CharField(max_length=320)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.QUEUED)
    smtp_code = models.PositiveSmallIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True, default="")
    at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["mail", "recipient"], name="delivery_one_per_recipient")]
        # An event stream's look for what changed since a moment.
        indexes = [models.Index(fields=["at"], name="delivery_changed_at")]

    def __str__(self) -> str:
        return f"{self.recipient}: {self.status}"


class SuppressionReason(models.TextChoices):
    BOUNCED = "bounced"
    COMPLAINED = "complained"


class Suppression(models.Model):
    """An address an account's mail no longer goes to: it bounced for good or complained.
    Kept lower-cased: addresses are compared without regard to case."""

    account = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="suppressions")
    address = models.CharField(max_length=320)
    reason = models.CharField(max_length=10, choices=SuppressionReason.choices)
    at = models.DateTimeField()
    # The sent copy (a message with direction "out") whose bounce or complaint caused it.
    message = models.ForeignKey("mailboxes.Message", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "address"], name="suppression_one_per_address")]

    def __str__(self) -> str:
        return f"{self.address} ({self.reason})"
