"""Storing what SMTP receives: who may receive mail at an address, and one message for
every accepted mailbox (docs/architecture.md, "SMTP in").

Plain functions, called by the server (relay/inbound/server.py) through its database
thread pools, so tests call them without a socket.
"""
import logging
import threading
import time
import uuid
from dataclasses import dataclass

from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Account, AccountStatus
from mailboxes import wakeups
from mailboxes.ending import mailboxes_expire_due
from mailboxes.models import Mailbox, MailboxStatus, Message, MessageContent, Plan
from mailboxes.quotas import stored_bytes_limit
from mailboxes.signals import event_happened
from mailboxes.text import text_of_html
from relay.inbound.extraction import find_codes, find_links
from relay.inbound.parsing import parse_message

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipient:
    mailbox_id: uuid.UUID
    address: str
    stored_bytes: int
    quota_bytes: int

    def fits(self, size: int) -> bool:
        return self.stored_bytes + size <= self.quota_bytes


class MailboxFull(Exception):
    """No accepted mailbox has room for the message (the plan's storage quota)."""


def recipient_mailbox(address: str) -> Recipient | None:
    """The mailbox that may receive mail at `address` right now, or None.

    The mailbox's own `expires_at` is checked here, with the same lazy expiry the API
    uses: a mailbox past its time is expired on the spot and refused, even if no worker
    has run yet. A suspended account's mailboxes refuse mail while it is suspended
    (docs/api.md). One statement, written out rather than built by the ORM on every RCPT,
    where building it is a large share of runsmtp's time (docs/benchmarks.md, "SMTP
    ingest")."""
    address = address.strip().lower()
    local_part, at, domain = address.rpartition("@")
    if not at or not local_part or domain not in settings.RELAY_DOMAINS or len(address) > 320:
        return None
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(_RECIPIENT_SQL, [connection.ops.adapt_datetimefield_value(now), address, MailboxStatus.ACTIVE])
        row = cursor.fetchone()
    if row is None:
        return None
    mailbox_id, stored_bytes, due, plan, owner_status = row
    mailbox_id = Mailbox._meta.pk.to_python(mailbox_id)
    if owner_status == AccountStatus.SUSPENDED:
        return None
    if due:
        mailboxes_expire_due(mailbox_ids=[mailbox_id], now=now)
        return None
    return Recipient(mailbox_id, address, stored_bytes, stored_bytes_limit(plan or Plan.FREE))


_RECIPIENT_SQL = (
    f"SELECT m.id, m.stored_bytes, m.expires_at <= %s, a.plan, a.status FROM {Mailbox._meta.db_table} m"
    f" LEFT JOIN {Account._meta.db_table} a ON a.id = m.owner_id WHERE m.address = %s AND m.status = %s"
)


def deliver_message(*, raw: bytes, mail_from: str, recipients: list[Recipient], server_id: str = "") -> list[int]:
    """Store one received message for each accepted mailbox that still takes it.
    `server_id`: the message's id on the mail server it was read from (relay/mailserver/);
    a second copy with the same id in a mailbox is refused by the database (IntegrityError).

    The bytes and the parsed bodies are stored once (MessageContent), shared by one
    Message row per recipient. Mailboxes that ended between RCPT and DATA (deleted or
    purged) are skipped, and so are those the message would take over their storage
    quota; if that leaves none, MailboxFull. On PostgreSQL the transaction has a
    deadline (RELAY_SMTP_STORE_SECONDS): storage that cannot finish in time is rolled
    back whole, and the client is told to try again, so nothing is stored twice."""
    parsed = parse_message(raw)
    codes = find_codes(parsed.subject, parsed.text or text_of_html(parsed.html))
    links = find_links(parsed.text, parsed.html)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout = %s", [settings.RELAY_SMTP_STORE_SECONDS * 1000])
        live = _count_one_more_message(recipients, len(raw))
        if not live:
            if any(not r.fits(len(raw)) for r in recipients):
                raise MailboxFull()
            return []
        content = MessageContent(raw=raw, text=parsed.text, html=parsed.html, headers=parsed.headers,
                                 attachments=parsed.attachments, codes=codes, links=links,
                                 parsed_fully=parsed.parsed_fully)  # its words are owed: see words_owed
        _insert([content])
        messages = [
            Message(
                mailbox_id=recipient.mailbox_id,
                content=content,
                envelope_from=mail_from[:320],
                envelope_to=recipient.address[:320],
                from_header=parsed.from_header,
                to_header=parsed.to_header,
                subject=parsed.subject,
                size=len(raw),
                has_attachments=bool(parsed.attachments),
                server_id=server_id,
            )
            for recipient in recipients if recipient.mailbox_id in live
        ]
        _insert(messages)
        event_happened.send(sender=Message, event="message.received", messages=messages)
        wakeups.publish_on_commit(live, "message")
        transaction.on_commit(words_owed)
    logger.info("stored a %d-byte message from %s for %d mailbox(es)", len(raw), mail_from or "<>", len(messages))
    return [message.id for message in messages]


def _insert(rows: list) -> None:
    """INSERT `rows` (instances of one model, without ids) in one statement and set their
    ids, as bulk_create does, but without building the query anew for every message,
    which is a large share of deliver_message's time (docs/benchmarks.md). Each value goes
    through its field's pre_save (auto_now_add) and preparation (JSON, bytes, times,
    UUIDs), as the ORM sends it."""
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


# Sent by name: relay/tasks.py imports the flows (this one among them), not the reverse.
WORDS_TASK = "relay.tasks.index_owed_words"
# A worker is asked to write owed words at most this often per process, and that long
# after the first message that owes them: one task for every message a second brings.
WORDS_DELAY_SECONDS = 1.0
_words_lock = threading.Lock()
_words_next_publish = 0.0


def words_owed() -> None:
    """Ask a worker to write the words of the messages just stored (search's index; see
    mailboxes.services.contents_index_words), at most once per WORDS_DELAY_SECONDS in
    this process. The task runs WORDS_DELAY_SECONDS after it is asked for, so it finds
    every message committed before the next ask. Words that a lost or unpublished task
    leaves owed are written by the next one, by beat's backstop, or by the first search
    that needs them: nothing a client sees waits on this."""
    global _words_next_publish
    if connection.vendor != "postgresql":
        return
    with _words_lock:
        now = time.monotonic()
        if now < _words_next_publish:
            return
        _words_next_publish = now + WORDS_DELAY_SECONDS
    # Published from a thread of its own: the message's 250 never waits on the broker.
    threading.Thread(target=_ask_for_words, name="smtp-words", daemon=True).start()


def _ask_for_words() -> None:
    try:
        current_app.signature(WORDS_TASK).apply_async(countdown=WORDS_DELAY_SECONDS)
    except Exception:
        logger.warning("could not queue the writing of owed search words; beat's backstop will", exc_info=True)
    finally:
        connection.close()  # this thread's own, if it opened one (a task run eagerly, in tests)


def _count_one_more_message(recipients: list[Recipient], size: int) -> set:
    """Add the message to message_count and stored_bytes of those mailboxes still there
    (not deleted, not purged) with room for it under their quota, and return their ids:
    the liveness check, the quota check and the counters in one statement per quota, on
    the ingest hot path (bench/smtp_ingest.py)."""
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
