"""Turning what happened into owed deliveries, inside the transaction that made it
happen (mailboxes.signals.event_happened), and queueing each delivery's
task once that transaction commits."""
import json
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from core.clock import db_now
from core.storage import execute_prepared
from mailboxes.models import Mailbox
from webhooks.models import Webhook, WebhookDelivery, WebhookEvent


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


# What a delivery's data holds: the API's shapes of a mailbox and of a message list item
# (api/serializers.py: MailboxSerializer, MessageSummarySerializer), field by field, as
# (wire name, how it is read from the row). webhooks/ sits below api/, so the shapes are
# named here; tests/test_shapes.py fails when they and the serializers part.
MAILBOX_FIELDS = (
    ("id", "id"), ("address", "address"), ("status", "status"), ("created_at", "created_at"),
    ("expires_at", "expires_at"), ("expired_at", "expired_at"), ("message_count", "message_count"),
    ("name", "name"), ("tags", "tags"), ("metadata", lambda mailbox: json.loads(mailbox.metadata)),
    ("sandbox", "sandbox"),
    ("deleted_at", "deleted_at"),  # a webhook's own: an ended mailbox says when it was deleted
)
MESSAGE_FIELDS = (
    ("id", "id"), ("mailbox_id", "mailbox_id"), ("from", "sender"), ("to", "to_header"),
    ("envelope_from", "envelope_from"), ("envelope_to", "envelope_to"), ("subject", "subject"),
    ("received_at", "received_at"), ("size", "size"), ("is_read", "is_read"),
    ("has_attachments", "has_attachments"), ("authenticated", "authenticated"), ("direction", "direction"),
    ("thread_id", "thread_id"), ("rcpt_to", "rcpt_to"),
)


def rendered(row, fields) -> dict:
    """`row` as JSON's values, field by field (`fields`: MAILBOX_FIELDS, MESSAGE_FIELDS)."""
    data = {}
    for name, read in fields:
        value = read(row) if callable(read) else getattr(row, read)
        data[name] = str(value) if isinstance(value, uuid.UUID) else _iso(value) if isinstance(value, datetime) else value
    return data


def _mailbox_data(mailbox: Mailbox) -> dict:
    return rendered(mailbox, MAILBOX_FIELDS)


def _message_data(message) -> dict:
    if message.received_at is None:  # not read back from the database where it was stored
        message.received_at = db_now()
    return rendered(message, MESSAGE_FIELDS)


# Written out: it runs for every message stored, and building the ORM's query anew each
# time cost more than the query (docs/benchmarks.md, "SMTP ingest").
_ANY_ENABLED = f"SELECT 1 FROM {Webhook._meta.db_table} WHERE disabled_at IS NULL LIMIT 1"


def _any_webhooks() -> bool:
    """Whether any webhook is enabled at all: most deployments have none, and then the
    hot paths that record events (SMTP ingest, the sweep) skip their lookups."""
    with connection.cursor() as cursor:
        execute_prepared(cursor, "relay_any_webhooks", _ANY_ENABLED, [])
        return cursor.fetchone() is not None


def _subscribers(event: str, mailboxes: dict) -> list[tuple[Webhook, Mailbox]]:
    """(webhook, mailbox) for every enabled webhook of the mailboxes' owners that wants
    `event` for that mailbox. One query, however many mailboxes."""
    owners = {mailbox.owner_id for mailbox in mailboxes.values() if mailbox.owner_id}
    if not owners:
        return []
    pairs = []
    for webhook in Webhook.objects.filter(owner_id__in=owners, disabled_at=None):
        if event not in webhook.events:
            continue
        for mailbox in mailboxes.values():
            if mailbox.owner_id == webhook.owner_id and webhook.mailbox_id in (None, mailbox.id):
                pairs.append((webhook, mailbox))
    return pairs


def record(event: str, deliveries: list[tuple[Webhook, dict]]) -> None:
    """Write the deliveries, and queue their tasks once the transaction commits. Each is
    leased from the start: the sweep leaves it to its task unless that task is lost."""
    if not deliveries:
        return
    now = db_now()
    rows = WebhookDelivery.objects.bulk_create([
        WebhookDelivery(webhook=webhook, event=event, message_id=f"msg_{uuid.uuid4().hex}",
                        payload={"type": event, "timestamp": _iso(now), "data": data},
                        lease_until=now + timedelta(seconds=settings.RELAY_WEBHOOK_LEASE_SECONDS))
        for webhook, data in deliveries
    ])
    pairs = [(row.webhook_id, row.id) for row in rows]

    def publish() -> None:
        from webhooks.tasks import publish_by_receiver

        publish_by_receiver(pairs)

    transaction.on_commit(publish)


def _messages_received(messages) -> None:
    mailboxes = {mailbox.id: mailbox for mailbox in Mailbox.objects.filter(
        id__in={message.mailbox_id for message in messages}).only("id", "owner_id")}
    by_mailbox = {}
    for message in messages:
        by_mailbox.setdefault(message.mailbox_id, []).append(message)
    record(WebhookEvent.MESSAGE_RECEIVED, [
        (webhook, _message_data(message))
        for webhook, mailbox in _subscribers(WebhookEvent.MESSAGE_RECEIVED, mailboxes)
        for message in by_mailbox[mailbox.id]
    ])


def _mailboxes_ended(name: str, mailbox_ids) -> None:
    mailboxes = {mailbox.id: mailbox for mailbox in Mailbox.objects.filter(id__in=mailbox_ids, owner__isnull=False)}
    record(name, [(webhook, {"mailbox": _mailbox_data(mailbox)}) for webhook, mailbox in _subscribers(name, mailboxes)])


def _cleanup_dead(mailbox_id) -> None:
    mailboxes = {mailbox.id: mailbox for mailbox in Mailbox.objects.filter(id=mailbox_id, owner__isnull=False)}
    record(WebhookEvent.CLEANUP_DEAD, [
        (webhook, {"mailbox": _mailbox_data(mailbox), "attempts": mailbox.cleanup_attempts,
                   "last_error": mailbox.cleanup_last_error})
        for webhook, mailbox in _subscribers(WebhookEvent.CLEANUP_DEAD, mailboxes)
    ])


DELIVERY_EVENTS = (WebhookEvent.MESSAGE_SENT, WebhookEvent.MESSAGE_DEFERRED, WebhookEvent.MESSAGE_FAILED,
                   WebhookEvent.MESSAGE_BOUNCED, WebhookEvent.MESSAGE_COMPLAINED)


def _delivered(event: str, mail, deliveries) -> None:
    """A sent message's recipients that reached `event`'s state (docs/delivery.md)."""
    mailboxes = {mailbox.id: mailbox for mailbox in Mailbox.objects.filter(id=mail.mailbox_id, owner__isnull=False)}
    record(event, [
        (webhook, {"mailbox_id": str(mail.mailbox_id), "message_id": mail.kept_as_id, "recipient": row.recipient,
                   "status": row.status, "smtp_code": row.smtp_code, "detail": row.detail})
        for webhook, _ in _subscribers(event, mailboxes) for row in deliveries
    ])


def on_event_happened(sender, event: str, **kwargs) -> None:
    """mailboxes.signals.event_happened: record the deliveries `event` owes, inside the
    transaction in which it happened."""
    if not _any_webhooks():
        return
    if event == WebhookEvent.MESSAGE_RECEIVED:
        _messages_received(kwargs["messages"])
    elif event in (WebhookEvent.MAILBOX_EXPIRED, WebhookEvent.MAILBOX_DELETED):
        _mailboxes_ended(event, kwargs["mailbox_ids"])
    elif event == WebhookEvent.CLEANUP_DEAD:
        _cleanup_dead(kwargs["mailbox_id"])
    elif event in DELIVERY_EVENTS:
        _delivered(event, kwargs["mail"], kwargs["deliveries"])
