"""What a mailbox is: mailboxes, the mail they hold, the addresses ever handed out, and
what each plan allows them. Who owns them is accounts/."""
import uuid
from datetime import datetime

from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q

from accounts.models import Plan  # noqa: F401 (re-exported: what a mailbox's owner may be on)
from owed import OwedWork


class AddressReservation(models.Model):
    """Every address ever handed out. Outlives the mailbox (retention purges mailboxes,
    never reservations), so an address is never given to a second holder."""

    address = models.CharField(max_length=320, primary_key=True)
    reserved_at = models.DateTimeField(auto_now_add=True)


class MailboxStatus(models.TextChoices):
    # Before the backend is asked: invisible, refusing mail, owing a deprovision if it fails.
    PROVISIONING = "provisioning"
    ACTIVE = "active"
    EXPIRED = "expired"
    DELETED = "deleted"


class CleanupState(models.TextChoices):
    """Deprovisioning on the mail backend, owed once a mailbox stops being active.

    pending: owed, a task is (or should be) queued for it; running: a worker holds it;
    done: deprovisioned; dead: given up, waiting for an operator."""

    NONE = "", "not due"
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"


# Live: being provisioned or active (MailboxQuerySet.live).
LIVE = Q(status__in=(MailboxStatus.PROVISIONING, MailboxStatus.ACTIVE))


class MailboxQuerySet(models.QuerySet):
    # "Due", "receiving" and "live" are defined here (and in Mailbox.is_due/receives), nowhere else.
    def due(self, now):
        """Active mailboxes whose lifetime has ended."""
        return self.filter(status=MailboxStatus.ACTIVE, expires_at__lte=now)

    def receiving(self, now):
        """Mailboxes that may receive mail now: active and not yet due."""
        return self.filter(status=MailboxStatus.ACTIVE, expires_at__gt=now)

    def live(self):
        """Mailboxes that count against their owner's plan and hold their domain: being
        provisioned or active."""
        return self.filter(LIVE)

    def visible(self):
        """What a caller may ever see: not deleted, not still being provisioned."""
        return self.filter(status__in=(MailboxStatus.ACTIVE, MailboxStatus.EXPIRED))


class Mailbox(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Null for an anonymous mailbox, which only its own token may use.
    owner = models.ForeignKey("accounts.Account", null=True, blank=True, on_delete=models.CASCADE, related_name="mailboxes")
    address = models.CharField(max_length=320, unique=True)
    status = models.CharField(max_length=12, choices=MailboxStatus.choices, default=MailboxStatus.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    expired_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # SHA-256 of the anonymous creator's token, if any.
    token_hash = models.CharField(max_length=64, null=True, blank=True, unique=True)
    # A sandbox also catches what its SMTP credentials submit, to anyone (docs/sandbox.md).
    sandbox = models.BooleanField(default=False, db_default=False)
    # accounts.identity.secret_digest of a sandbox's SMTP password (its username is the address).
    smtp_password_hash = models.CharField(max_length=64, null=True, blank=True)
    # Kept in step with the messages on every insert and delete: a read never counts.
    message_count = models.PositiveIntegerField(default=0)
    # Checked against the plan's storage quota.
    stored_bytes = models.PositiveBigIntegerField(default=0)
    # The owner's labels (docs/api.md): set at creation or by PATCH, filtered on by the list.
    name = models.CharField(max_length=100, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    # JSON text: PostgreSQL's jsonb cannot hold a NUL that a JSON string may.
    metadata = models.TextField(default="{}", blank=True)
    # The mail backend's id for this mailbox's principal (Stalwart account id).
    backend_id = models.CharField(max_length=100, blank=True, default="")
    # How far the reader (relay/mailserver/) got: the JMAP Email state, and the account's
    # marker (Cyrus: HIGHESTMODSEQ) when it last looked.
    server_state = models.CharField(max_length=255, blank=True, default="", db_default="")
    server_marker = models.CharField(max_length=255, blank=True, default="", db_default="")

    # After it, a sweep takes the creator for dead and owes a deprovision.
    provision_lease_until = models.DateTimeField(null=True, blank=True)

    # The expires_at an expire task was queued for ahead (expiry.sweep.schedule_upcoming).
    expiry_scheduled_for = models.DateTimeField(null=True, blank=True)

    cleanup_state = models.CharField(max_length=8, choices=CleanupState.choices, default=CleanupState.NONE, blank=True)
    # The last claim on the cleanup: how a compare-and-set learns which rows it won.
    cleanup_claim = models.UUIDField(null=True, blank=True)
    # When the cleanup last became pending (queued, awaiting a worker).
    cleanup_queued_at = models.DateTimeField(null=True, blank=True)
    # After it, a sweep queues the cleanup again.
    cleanup_lease_until = models.DateTimeField(null=True, blank=True)
    cleanup_attempts = models.PositiveIntegerField(default=0)
    cleanup_last_error = models.TextField(blank=True, default="")
    cleanup_done_at = models.DateTimeField(null=True, blank=True)
    # When the cleanup last became a dead letter (the admin's chart counts them per minute).
    cleanup_dead_at = models.DateTimeField(null=True, blank=True)

    objects = MailboxQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "mailboxes"
        indexes = [
            # The sweep's due mailboxes: only active rows, so it stays as small as the live set.
            models.Index(fields=["expires_at"], condition=Q(status="active"), name="mailbox_active_due"),
            # An owner's list, newest first.
            models.Index(fields=["owner", "status", "-created_at"], name="mailbox_owner_list"),
            # The sweep's "cleanups whose lease has lapsed".
            models.Index(
                fields=["cleanup_lease_until"],
                condition=Q(cleanup_state__in=["pending", "running"]),
                name="mailbox_cleanup_lease",
            ),
            # The sweep's "provisionings whose creator vanished".
            models.Index(fields=["provision_lease_until"], condition=Q(status="provisioning"),
                         name="mailbox_provisioning_lease"),
            # Dead letters and the retention purge.
            models.Index(fields=["cleanup_state", "status"], name="mailbox_cleanup_state"),
            # The retention purge, one per way a mailbox ends.
            models.Index(fields=["expired_at"], condition=Q(status="expired"), name="mailbox_expired_at"),
            models.Index(fields=["deleted_at"], condition=Q(status="deleted"), name="mailbox_deleted_at"),
            # The admin's chart of cleanups done and dead per minute over the last hour.
            models.Index(fields=["cleanup_done_at"], condition=Q(cleanup_done_at__isnull=False),
                         name="mailbox_cleanup_done_at"),
            models.Index(fields=["cleanup_dead_at"], condition=Q(cleanup_dead_at__isnull=False),
                         name="mailbox_cleanup_dead_at"),
        ]

    def __str__(self) -> str:
        return self.address

    def is_due(self, now: datetime) -> bool:
        return self.status == MailboxStatus.ACTIVE and self.expires_at <= now

    def receives(self, now: datetime) -> bool:
        return self.status == MailboxStatus.ACTIVE and self.expires_at > now


# A mailbox's cleanup is owed work (owed/), in its cleanup_* columns.
CLEANUPS = OwedWork(
    model=Mailbox, state="cleanup_state", prefix="cleanup_",
    owed=CleanupState.PENDING, running=CleanupState.RUNNING, dead=CleanupState.DEAD,
    max_retries_setting="RELAY_CLEANUP_MAX_RETRIES", backoff_setting="RELAY_CLEANUP_RETRY_BACKOFF_SECONDS",
    backoff_max_setting="RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS", lease_setting="RELAY_CLEANUP_LEASE_SECONDS",
)


def cleanup_owed(*, now: datetime, claim: uuid.UUID, not_before: datetime | None = None) -> dict:
    """The fields that make a cleanup owed under `claim`, leased from `not_before` when it
    must wait: written by every path that ends a mailbox, in the UPDATE that ends it."""
    return {"cleanup_state": CleanupState.PENDING, "cleanup_claim": claim, "cleanup_queued_at": now,
            "cleanup_lease_until": CLEANUPS.lease(max(now, not_before or now))}


class MessageContent(models.Model):
    """What one DATA delivered: the raw bytes (the record) and what was parsed out of them,
    stored once however many recipients share it."""

    raw = models.BinaryField()
    text = models.TextField(blank=True, default="")
    html = models.TextField(blank=True, default="")
    headers = models.JSONField(default=list)
    attachments = models.JSONField(default=list)
    # Found once when stored, so a read never runs the extraction.
    codes = models.JSONField(default=list, db_default=[], blank=True)
    links = models.JSONField(default=list, db_default=[], blank=True)
    # False when parsing stopped at a cap: the raw bytes are whole.
    parsed_fully = models.BooleanField(default=True)
    # SPF, DKIM and DMARC as found when it was stored (relay/verdicts.py).
    authentication = models.JSONField(default=dict, db_default={}, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Words of the subject and text for `q`, shared by every recipient of the content.
    # Null until a worker or a search writes them (mailboxes.messages.contents_index_words);
    # its GIN index is made by migration, on PostgreSQL only.
    words = SearchVectorField(null=True, blank=True)


class Thread(models.Model):
    """A conversation in one mailbox: the messages linked by Message-ID, In-Reply-To and
    References, whichever side sent them (mailboxes/threads.py)."""

    mailbox = models.ForeignKey(Mailbox, on_delete=models.CASCADE, related_name="threads")
    # The subject of the message that started it.
    subject = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)


class ThreadKey(models.Model):
    """A Message-ID seen in a mailbox and the thread it belongs to, whatever order the
    thread's messages arrive in."""

    # Indexed by thread_key_once.
    mailbox = models.ForeignKey(Mailbox, on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.CharField(max_length=255)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="keys")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["mailbox", "key"], name="thread_key_once")]


class Direction(models.TextChoices):
    IN = "in"  # received
    OUT = "out"  # sent from the mailbox (relay/outbox/outbound.py)


class Message(models.Model):
    """A message as one mailbox received or sent it: the envelope and the few parsed
    fields a list shows, with the shared content (raw bytes, bodies) behind `content`."""

    # Indexed by message_mailbox_list (its first column).
    mailbox = models.ForeignKey(Mailbox, on_delete=models.CASCADE, related_name="messages", db_index=False)
    content = models.ForeignKey(MessageContent, on_delete=models.CASCADE, related_name="messages")
    received_at = models.DateTimeField(auto_now_add=True)
    envelope_from = models.CharField(max_length=320, blank=True, default="")
    envelope_to = models.CharField(max_length=320, blank=True, default="")
    # Every RCPT TO of a submission a sandbox caught (a Bcc among them); [] for mail received.
    rcpt_to = models.JSONField(default=list, db_default=[], blank=True)
    from_header = models.TextField(blank=True, default="")
    to_header = models.TextField(blank=True, default="")
    cc_header = models.TextField(blank=True, default="", db_default="")
    subject = models.TextField(blank=True, default="")
    size = models.PositiveIntegerField()
    has_attachments = models.BooleanField(default=False)
    is_read = models.BooleanField(default=False)
    # The content's verdict is pass: what `authenticated=true` filters on.
    authenticated = models.BooleanField(default=False, db_default=False)
    # Its JMAP Email id, for mail the reader fetched from a mail server: stored once.
    server_id = models.CharField(max_length=255, blank=True, default="", db_default="")
    direction = models.CharField(max_length=3, choices=Direction.choices, default=Direction.IN,
                                 db_default=Direction.IN)
    # Its Message-ID header, without the angle brackets ("" without one).
    message_id = models.CharField(max_length=255, blank=True, default="", db_default="")
    # The mailbox's owner while it is visible (cleared on delete): an owner's search filters
    # on it. No constraint: a check would lock the account's row for every stored message.
    owner = models.ForeignKey("accounts.Account", null=True, blank=True, on_delete=models.DO_NOTHING,
                              db_constraint=False, related_name="+", db_index=False)
    # Null for mail stored before threads were kept. Indexed by message_thread below.
    thread = models.ForeignKey(Thread, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages",
                               db_index=False)

    class Meta:
        indexes = [models.Index(fields=["mailbox", "-received_at"], name="message_mailbox_list"),
                   models.Index(fields=["thread", "received_at"], name="message_thread"),
                   # An owner's messages, newest first.
                   models.Index(fields=["owner", "-received_at"], name="message_owner_list",
                                condition=Q(owner__isnull=False))]
        constraints = [models.UniqueConstraint(fields=["mailbox", "server_id"], condition=~Q(server_id=""),
                                               name="message_stored_once")]

    @property
    def sender(self) -> str:
        """Who sent it, as every door shows it: the From header, or the envelope sender
        when the mail has none (a bare `MAIL FROM` and `DATA` with no headers)."""
        return shown_sender(self.from_header, self.envelope_from)


def shown_sender(from_header: str, envelope_from: str) -> str:
    """Message.sender for a page that reads the two columns without a model instance."""
    return from_header or envelope_from


class FaultStage(models.TextChoices):
    """Where a sandbox's submission port may answer a fault (docs/sandbox.md, "Faults")."""

    AUTH = "auth"
    MAIL = "mail"
    RCPT = "rcpt"
    DATA = "data"


class FaultRule(models.Model):
    """One of a sandbox's fault rules: at `stage`, for an address matching `match`, with
    `probability`, the submission port answers `code` (after `delay_seconds`), until
    `remaining` (of `times`) runs out. `remaining` is spent by an UPDATE, so every SMTP
    process spends one count once."""

    mailbox = models.ForeignKey(Mailbox, on_delete=models.CASCADE, related_name="fault_rules")
    position = models.PositiveSmallIntegerField()
    stage = models.CharField(max_length=4, choices=FaultStage.choices)
    code = models.PositiveSmallIntegerField()
    message = models.CharField(max_length=200, blank=True, default="")
    match = models.CharField(max_length=320, blank=True, default="")
    probability = models.FloatField(default=1.0)
    times = models.PositiveIntegerField(null=True, blank=True)
    remaining = models.PositiveIntegerField(null=True, blank=True)
    delay_seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["mailbox", "position"], name="fault_rule_position")]
