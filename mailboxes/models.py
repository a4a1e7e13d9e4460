"""What a mailbox is: mailboxes, the mail they hold, the addresses ever handed out, and
what each plan allows them. Who owns them is accounts/."""
import uuid
from datetime import datetime

from django.conf import settings
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
    # Written before the backend is asked to provision it (mailboxes/creation.py):
    # invisible to the API, refusing mail, and owing a deprovision if it never
    # becomes active.
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
    # Kept in step with the messages by every insert and delete (relay.ingest, the
    # API), so reading a mailbox is one primary-key lookup: counting per read is dear
    # (docs/benchmarks.md, "API").
    message_count = models.PositiveIntegerField(default=0)
    # The bytes of the messages it holds (each counted in full, shared or not), kept in
    # step the same way: the plan's storage quota is checked against it.
    stored_bytes = models.PositiveBigIntegerField(default=0)
    # The owner's labels (docs/api.md): set at creation or by PATCH, filtered on by the list.
    name = models.CharField(max_length=100, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    # A JSON object kept as its JSON text: PostgreSQL's jsonb cannot hold the NUL
    # character that a JSON string may, and the owner's metadata is returned as given.
    metadata = models.TextField(default="{}", blank=True)
    # The mail backend's id for this mailbox's principal (Stalwart account id).
    backend_id = models.CharField(max_length=100, blank=True, default="")
    # Where the mail reader (relay/mailserver/) got to in the account on a mail server
    # that holds the mail: the JMAP Email state it has read up to, and the server's
    # marker of the account (Cyrus: its HIGHESTMODSEQ) when it last looked. Empty for the
    # local backend.
    server_state = models.CharField(max_length=255, blank=True, default="", db_default="")
    server_marker = models.CharField(max_length=255, blank=True, default="", db_default="")

    # Until then a `provisioning` mailbox is trusted to its creator; after it, a sweep
    # takes the creator for dead and makes the mailbox owe a deprovision.
    provision_lease_until = models.DateTimeField(null=True, blank=True)

    # The expires_at an expire task was queued for ahead of time (see
    # expiry.services.mailboxes_schedule_upcoming); a renew makes it stale by itself.
    expiry_scheduled_for = models.DateTimeField(null=True, blank=True)

    # Cleanup bookkeeping, written by expiry/ (see expiry/services.py).
    cleanup_state = models.CharField(max_length=8, choices=CleanupState.choices, default=CleanupState.NONE, blank=True)
    # The token of the last caller that moved the cleanup (queued it, or is running it):
    # how a compare-and-set learns which rows it won, and how a runner knows it still
    # holds the cleanup when it records the outcome.
    cleanup_claim = models.UUIDField(null=True, blank=True)
    # When the cleanup last became pending (queued, awaiting a worker).
    cleanup_queued_at = models.DateTimeField(null=True, blank=True)
    # Until then, the queued or running task is trusted to finish; after it, a sweep
    # queues the cleanup again.
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
            # The sweep's "due active mailboxes": only active rows are in it, so it stays
            # as small as the live set however many millions have expired.
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


# A mailbox's cleanup on the mail backend is owed work (owed/): its bookkeeping is the
# cleanup_* columns above. expiry/ takes and settles it; ending a mailbox records it.
CLEANUPS = OwedWork(
    model=Mailbox, state="cleanup_state", prefix="cleanup_",
    owed=CleanupState.PENDING, running=CleanupState.RUNNING, dead=CleanupState.DEAD,
    max_retries=lambda: settings.RELAY_CLEANUP_MAX_RETRIES,
    backoff_seconds=lambda: settings.RELAY_CLEANUP_RETRY_BACKOFF_SECONDS,
    backoff_max_seconds=lambda: settings.RELAY_CLEANUP_RETRY_BACKOFF_MAX_SECONDS,
    lease_seconds=lambda: settings.RELAY_CLEANUP_LEASE_SECONDS,
)


def cleanup_owed(*, now: datetime, claim: uuid.UUID, not_before: datetime | None = None) -> dict:
    """The fields that make a cleanup owed under `claim`, leased from `not_before` when it
    must wait: written by every path that ends a mailbox, in the UPDATE that ends it."""
    return {"cleanup_state": CleanupState.PENDING, "cleanup_claim": claim, "cleanup_queued_at": now,
            "cleanup_lease_until": CLEANUPS.lease(max(now, not_before or now))}


class MessageContent(models.Model):
    """What one SMTP DATA delivered: the raw bytes, which are the record, and what could
    be parsed out of them. Stored once however many recipients share it (a 10 MB DATA
    to 50 mailboxes is one copy, not 50); each recipient has a Message pointing here."""

    raw = models.BinaryField()
    text = models.TextField(blank=True, default="")
    html = models.TextField(blank=True, default="")
    headers = models.JSONField(default=list)
    attachments = models.JSONField(default=list)
    # What a client reads out of the message (docs/api.md, "Codes and links"), computed
    # once when it is stored: a read never runs the extraction, whatever the mail holds.
    codes = models.JSONField(default=list, db_default=[], blank=True)
    links = models.JSONField(default=list, db_default=[], blank=True)
    # False when parsing stopped at a cap (header lines, MIME parts, time): the raw bytes
    # are whole, the parsed fields hold what was read before the cap.
    parsed_fully = models.BooleanField(default=True)
    # Who really sent it (docs/api.md, "Verdicts"): SPF, DKIM and DMARC as found when it
    # was stored (relay/authentication.py). Empty for mail stored before verdicts.
    authentication = models.JSONField(default=dict, db_default={}, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The words of the subject and text for `q` (docs/api.md): PostgreSQL's to_tsvector with
    # the `simple` configuration, so codes and words of any language match as written.
    # Here, not on each Message, because every recipient of one DATA has the same subject
    # and text: 50 recipients share one word list, as they share the bytes. Null until
    # written: SMTP leaves them owed, and a worker or the first search that needs them
    # writes them (mailboxes.services.contents_index_words). Always null on SQLite, where
    # `q` is a substring match. Its GIN index, and the partial index of the owed ones,
    # are made by migration on PostgreSQL only, so they are not declared here.
    words = SearchVectorField(null=True, blank=True)


class Thread(models.Model):
    """A conversation in one mailbox: the messages linked by Message-ID, In-Reply-To and
    References, whichever side sent them (mailboxes/threads.py)."""

    mailbox = models.ForeignKey(Mailbox, on_delete=models.CASCADE, related_name="threads")
    # The subject of the message that started it.
    subject = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)


class ThreadKey(models.Model):
    """A Message-ID seen in a mailbox, as a message's own or as one it answers, and the
    thread it belongs to: how a message finds its thread whatever order the thread's
    messages arrive in."""

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

    # Indexed by message_mailbox_list below, whose first column it is: an index of its
    # own would only cost every stored message one more insert.
    mailbox = models.ForeignKey(Mailbox, on_delete=models.CASCADE, related_name="messages", db_index=False)
    content = models.ForeignKey(MessageContent, on_delete=models.CASCADE, related_name="messages")
    received_at = models.DateTimeField(auto_now_add=True)
    envelope_from = models.CharField(max_length=320, blank=True, default="")
    envelope_to = models.CharField(max_length=320, blank=True, default="")
    from_header = models.TextField(blank=True, default="")
    to_header = models.TextField(blank=True, default="")
    cc_header = models.TextField(blank=True, default="", db_default="")
    subject = models.TextField(blank=True, default="")
    size = models.PositiveIntegerField()
    has_attachments = models.BooleanField(default=False)
    is_read = models.BooleanField(default=False)
    # The content's verdict is pass: what `authenticated=true` filters on.
    authenticated = models.BooleanField(default=False, db_default=False)
    # The message's id on the mail server that holds it (its JMAP Email id), for mail the
    # reader fetched (relay/mailserver/); empty for mail Relay's own SMTP received. One
    # row per id and mailbox, whatever crashes, retries or overlapping reads happen. The
    # new columns have database defaults too, so rows written by SQL of their own (the
    # benchmarks' fills) need not name them.
    server_id = models.CharField(max_length=255, blank=True, default="", db_default="")
    direction = models.CharField(max_length=3, choices=Direction.choices, default=Direction.IN,
                                 db_default=Direction.IN)
    # Its Message-ID header, without the angle brackets ("" without one).
    message_id = models.CharField(max_length=255, blank=True, default="", db_default="")
    # The owner of its mailbox while the mailbox is visible (active or expired): set when
    # the message is stored, cleared when the mailbox is deleted (mailboxes/ending.py);
    # null for an ownerless mailbox's mail. An owner's search across their mailboxes
    # filters on it, where filtering on the set of their mailboxes hashed all of them for
    # every search (docs/benchmarks.md, "Message search"). No foreign key constraint: it
    # copies the mailbox's owner, whose own constraint holds, and a check would cost every
    # stored message a look-up and a lock on the account's row.
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
