"""Storing mail in mailboxes: who may receive it, and one message for every accepted
mailbox. The SMTP server (relay.inbound.storing) and the mail-server reader
(relay.mailserver.reader) both store through here.

The statements are written out rather than built by the ORM on every RCPT and DATA: on
the ingest hot path, building them was a large share of runsmtp's time
(docs/benchmarks.md, "SMTP ingest")."""
import logging
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction

from accounts.models import Account, AccountStatus
from mailboxes import wakeups
from mailboxes.ending import mailboxes_expire_due
from mailboxes.models import Direction, Mailbox, MailboxStatus, Message, MessageContent, Plan
from mailboxes.quotas import stored_bytes_limit
from mailboxes.signals import event_happened
from mailboxes.threads import Lineage, threads_assign
from owed.clock import db_now

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipient:
    mailbox_id: uuid.UUID
    address: str
    stored_bytes: int  # when it was looked up
    quota_bytes: int

    def fits(self, size: int) -> bool:
        """The storage quota (settings.RELAY_QUOTAS), as an early answer to SMTP's RCPT
        with the declared size; DATA's own check is the UPDATE that counts the message."""
        return self.stored_bytes + size <= self.quota_bytes


class MailboxFull(Exception):
    """No accepted mailbox has room for the message (the plan's storage quota)."""


def _recipient(mailbox_id, address: str, stored_bytes: int, plan: str | None,
               owner_status: str | None) -> Recipient | None:
    """A suspended account's mailboxes refuse mail while it is suspended (docs/api.md)."""
    if owner_status == AccountStatus.SUSPENDED:
        return None
    return Recipient(Mailbox._meta.pk.to_python(mailbox_id), address, stored_bytes,
                     stored_bytes_limit(plan or Plan.FREE))


_BY_ADDRESS = (
    "SELECT m.id, m.stored_bytes, m.expires_at <= {now}, a.plan, a.status FROM " + Mailbox._meta.db_table + " m"
    " LEFT JOIN " + Account._meta.db_table + " a ON a.id = m.owner_id WHERE m.address = %s AND m.status = %s"
)


def recipient_at(address: str) -> Recipient | None:
    """The mailbox that may receive mail at `address` now (Mailbox.receives, by the
    database's clock, read in the look-up itself), or None. A mailbox past its time is
    expired on the spot and refused, as the API would. Its domain is one of RELAY_DOMAINS
    or a verified custom domain: no mailbox is ever made on any other."""
    address = address.strip().lower()
    local_part, at, domain = address.rpartition("@")
    if not at or not local_part or not domain or len(address) > 320:
        return None
    if connection.vendor == "postgresql":
        query, params = _BY_ADDRESS.format(now="clock_timestamp()"), [address, MailboxStatus.ACTIVE]
    else:  # SQLite: the one host's clock is the database's
        query = _BY_ADDRESS.format(now="%s")
        params = [connection.ops.adapt_datetimefield_value(db_now()), address, MailboxStatus.ACTIVE]
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        row = cursor.fetchone()
    if row is None:
        return None
    mailbox_id, stored_bytes, due, plan, owner_status = row
    if due:
        mailboxes_expire_due(mailbox_ids=[Mailbox._meta.pk.to_python(mailbox_id)])
        return None
    return _recipient(mailbox_id, address, stored_bytes, plan, owner_status)


def recipient_of(mailbox_id) -> Recipient | None:
    """The mailbox `mailbox_id` for mail it was delivered before its end (the mail
    server's, read later): any not deleted, or None."""
    row = (Mailbox.objects.filter(id=mailbox_id).exclude(status=MailboxStatus.DELETED)
           .values_list("address", "stored_bytes", "owner__plan", "owner__status").first())
    return _recipient(mailbox_id, *row) if row else None


def message_store(*, content: MessageContent, envelope_from: str, from_header: str, to_header: str, subject: str,
                  recipients: list[Recipient], server_id: str = "", cc_header: str = "",
                  lineage: Lineage = Lineage(), direction: str = Direction.IN, joining: int | None = None) -> list[int]:
    """Store `content` once and one Message for each recipient that still takes it: not
    deleted or purged since, with room under its quota. None: MailboxFull if a quota
    refused it, else []. `server_id`: the message's id on the mail server it was read
    from; a second copy with that id in a mailbox is refused (IntegrityError). On
    PostgreSQL the transaction has a deadline (RELAY_SMTP_STORE_SECONDS): storing that
    cannot finish in time is rolled back whole, so nothing is stored twice.

    Each message joins its thread (mailboxes/threads.py; `lineage` and `joining`). Mail
    a mailbox sent (`direction` out) is stored read, and neither announced nor waited
    for: waits and webhooks are about mail received."""
    size = len(content.raw)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout = %s", [settings.RELAY_SMTP_STORE_SECONDS * 1000])
        live = _count_one_more_message(recipients, size)
        if not live:
            if Mailbox.objects.filter(id__in=[r.mailbox_id for r in recipients]).exclude(
                    status=MailboxStatus.DELETED).exists():
                raise MailboxFull()
            return []
        _insert([content])
        threads = threads_assign(mailbox_ids=[r.mailbox_id for r in recipients if r.mailbox_id in live],
                                 lineage=lineage, subject=subject, joining=joining)
        messages = [
            Message(mailbox_id=recipient.mailbox_id, content=content, envelope_from=envelope_from[:320],
                    envelope_to=recipient.address[:320], from_header=from_header, to_header=to_header,
                    cc_header=cc_header, subject=subject, size=size, has_attachments=bool(content.attachments),
                    server_id=server_id, authenticated=(content.authentication or {}).get("verdict") == "pass",
                    direction=direction, is_read=direction == Direction.OUT, message_id=lineage.message_id,
                    thread_id=threads[recipient.mailbox_id])
            for recipient in recipients if recipient.mailbox_id in live
        ]
        _insert(messages)
        if direction == Direction.IN:
            event_happened.send(sender=Message, event="message.received", messages=messages)
            wakeups.publish_on_commit(live, "message")
    logger.info("stored a %d-byte message from %s for %d mailbox(es)", size, envelope_from or "<>", len(messages))
    return [message.id for message in messages]


def _insert(rows: list) -> None:
    """INSERT `rows` (instances of one model, without ids) in one statement and set their
    ids, as bulk_create does without building its query anew each time. Each value goes
    through its field's pre_save (auto_now_add) and preparation, as the ORM sends it."""
    meta = rows[0]._meta
    fields = [field for field in meta.concrete_fields if not field.primary_key]
    quote = connection.ops.quote_name
    one = f"({', '.join(['%s'] * len(fields))})"
    params = [field.get_db_prep_save(field.pre_save(row, True), connection) for row in rows for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(field.column) for field in fields)})"
            f" VALUES {', '.join([one] * len(rows))} RETURNING {quote(meta.pk.column)}",
            params,
        )
        ids = sorted(row[0] for row in cursor.fetchall())
    # Identity ids are handed out in the order of the VALUES: sorted, they match the rows.
    for row, row_id in zip(rows, ids):
        row.id = row_id


def _count_one_more_message(recipients: list[Recipient], size: int) -> set:
    """Add the message to message_count and stored_bytes of the mailboxes still there
    with room for it under their quota, and return their ids: the liveness check, the
    quota check (the only one) and the counters in one statement per quota."""
    id_field = Mailbox._meta.pk
    live = set()
    by_quota: dict[int, list] = {}
    for recipient in recipients:
        by_quota.setdefault(recipient.quota_bytes, []).append(recipient.mailbox_id)
    with connection.cursor() as cursor:
        for quota_bytes, mailbox_ids in by_quota.items():
            placeholders = ", ".join(["%s"] * len(mailbox_ids))
            cursor.execute(
                f"UPDATE {Mailbox._meta.db_table} SET message_count = message_count + 1,"
                f" stored_bytes = stored_bytes + %s"
                f" WHERE id IN ({placeholders}) AND status <> %s AND stored_bytes + %s <= %s RETURNING id",
                [size] + [id_field.get_db_prep_value(mailbox_id, connection) for mailbox_id in mailbox_ids]
                + [MailboxStatus.DELETED, size, quota_bytes],
            )
            live |= {id_field.to_python(row[0]) for row in cursor.fetchall()}
    return live
