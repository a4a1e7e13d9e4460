"""A mailbox's messages, written: who may receive mail and one message per accepted
mailbox, stored in statements written out (the ORM's building was most of SMTP's cost);
then marked read, deleted, their search words written."""
import logging
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Greatest

from accounts.identity import may_act
from accounts.models import Account, plan_limit
from mailboxes import wakeups
from mailboxes.lifecycle import mailboxes_expire_due
from mailboxes.mail_format import Lineage, text_of_html, topic
from mailboxes.models import Direction, Mailbox, MailboxStatus, Message, MessageContent, Plan, Thread, ThreadKey
from mailboxes.signals import event_happened
from mailboxes.threads import threads_assign, threads_merge
from core.storage import clock_sql, execute_prepared, keeps_search_words, written_out

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipient:
    mailbox_id: uuid.UUID
    address: str
    owner_id: int | None  # the mailbox's owner, copied onto its messages (Message.owner)
    stored_bytes: int  # when it was looked up
    quota_bytes: int

    def fits(self, size: int) -> bool:
        """The storage quota (settings.RELAY_QUOTAS), as an early answer to SMTP's RCPT
        with the declared size; DATA's own check is the UPDATE that counts the message."""
        return self.stored_bytes + size <= self.quota_bytes


class MailboxFull(Exception):
    """No accepted mailbox has room for the message (the plan's storage quota)."""


def _recipient(mailbox_id, address: str, owner_id: int | None, stored_bytes: int, plan: str | None,
               owner_status: str | None) -> Recipient | None:
    """An account that may not act (a suspended one: docs/api.md) has its mailboxes refuse mail."""
    if owner_id is not None and not may_act(owner_status):
        return None
    return Recipient(Mailbox._meta.pk.to_python(mailbox_id), address, owner_id, stored_bytes,
                     plan_limit(plan or Plan.FREE, "stored_bytes_per_mailbox"))


_BY_ADDRESS = (
    "SELECT m.id, m.owner_id, m.stored_bytes, m.expires_at <= {now}, a.plan, a.status"
    " FROM " + Mailbox._meta.db_table + " m"
    " LEFT JOIN " + Account._meta.db_table + " a ON a.id = m.owner_id WHERE m.address = %s AND m.status = %s"
)


def recipient_by_address(address: str) -> Recipient | None:
    """The mailbox that may receive mail at `address` now (by the database's clock), or
    None; one past its time is expired on the spot and refused."""
    address = address.strip().lower()
    local_part, at, domain = address.rpartition("@")
    if not at or not local_part or not domain or len(address) > 320:
        return None
    with connection.cursor() as cursor:
        now_sql, now_params = clock_sql()
        execute_prepared(cursor, "relay_recipient_at", _BY_ADDRESS.format(now=now_sql),
                         [*now_params, address, MailboxStatus.ACTIVE])
        row = cursor.fetchone()
    if row is None:
        return None
    mailbox_id, owner_id, stored_bytes, due, plan, owner_status = row
    if due:
        mailboxes_expire_due(mailbox_ids=[Mailbox._meta.pk.to_python(mailbox_id)])
        return None
    return _recipient(mailbox_id, address, owner_id, stored_bytes, plan, owner_status)


def recipient_by_id(mailbox_id) -> Recipient | None:
    """The mailbox `mailbox_id` for mail it was delivered before its end (the mail
    server's, read later): any not deleted, or None."""
    row = (Mailbox.objects.filter(id=mailbox_id).exclude(status=MailboxStatus.DELETED)
           .values_list("address", "owner_id", "stored_bytes", "owner__plan", "owner__status").first())
    return _recipient(mailbox_id, *row) if row else None


def message_store(*, content: MessageContent, envelope_from: str, from_header: str, to_header: str, subject: str,
                  recipients: list[Recipient], server_id: str = "", cc_header: str = "",
                  lineage: Lineage = Lineage(), direction: str = Direction.IN, joining: int | None = None,
                  rcpt_to: list[str] = ()) -> list[int]:
    """Store `content` once and one Message for each recipient that still takes it, in its
    thread. MailboxFull if a quota refused it; IntegrityError for a second copy of
    `server_id`. Mail sent (`direction` out) is stored read and not announced. `rcpt_to`:
    a submission's envelope recipients (a sandbox's catch), kept lowercased."""
    rcpt_to = [address.lower() for address in rcpt_to]
    size = len(content.raw)
    messages = [
        Message(mailbox_id=recipient.mailbox_id, owner_id=recipient.owner_id, content=content,
                envelope_from=envelope_from[:320], envelope_to=recipient.address[:320], from_header=from_header,
                to_header=to_header, cc_header=cc_header, subject=subject, size=size, has_attachments=bool(content.attachments),
                server_id=server_id, authenticated=(content.authentication or {}).get("verdict") == "pass",
                direction=direction, is_read=direction == Direction.OUT, message_id=lineage.message_id,
                rcpt_to=rcpt_to)
        for recipient in recipients
    ]
    try:
        with transaction.atomic():
            store = written_out(postgresql=_store_in_two_statements, portable=_store_step_by_step)
            messages = store(content, messages, recipients, lineage=lineage, subject=subject, joining=joining)
            if direction == Direction.IN:
                event_happened.send(sender=Message, event="message.received", messages=messages)
                wakeups.publish_on_commit({message.mailbox_id for message in messages}, "message")
    except _NoneLive:
        if Mailbox.objects.filter(id__in=[r.mailbox_id for r in recipients]).exclude(
                status=MailboxStatus.DELETED).exists():
            raise MailboxFull() from None
        return []
    logger.info("stored a %d-byte message from %s for %d mailbox(es)", size, envelope_from or "<>", len(messages))
    return [message.id for message in messages]


class _NoneLive(Exception):
    """No recipient takes the message: storing rolls back whatever it wrote."""


def _store_in_two_statements(content: MessageContent, messages: list[Message], recipients: list[Recipient], *,
                             lineage: Lineage, subject: str, joining: int | None) -> list[Message]:
    """PostgreSQL: the rule of _store_step_by_step in two statements. The first counts the
    message (locking the mailboxes) and inserts the content; the second threads it
    (mailboxes/threads.py's rule as SQL) and inserts the messages."""
    if not recipients:
        raise _NoneLive()
    id_field = Mailbox._meta.pk
    content_columns, content_values, content_params = _rows([content], database_now=True)
    recipient_ids = [id_field.get_db_prep_value(r.mailbox_id, connection) for r in recipients]
    with connection.cursor() as cursor:
        execute_prepared(
            cursor, f"relay_store_content_{len(recipients)}",
            f"WITH content AS (INSERT INTO {MessageContent._meta.db_table} ({content_columns})"
            f"   VALUES {content_values} RETURNING id),"
            f" live AS (UPDATE {Mailbox._meta.db_table} m SET message_count = m.message_count + 1,"
            "     stored_bytes = m.stored_bytes + %s"
            f"   WHERE m.id IN ({_placeholders(recipients, '::uuid')}) AND m.status <> %s"
            f"     AND m.stored_bytes + %s <= CASE m.id {' '.join(['WHEN %s::uuid THEN %s::bigint'] * len(recipients))} END"
            "   RETURNING m.id)"
            " SELECT (SELECT id FROM content), ARRAY(SELECT id FROM live)",
            [*content_params, len(content.raw), *recipient_ids, MailboxStatus.DELETED, len(content.raw),
             *[value for mailbox_id, r in zip(recipient_ids, recipients) for value in (mailbox_id, r.quota_bytes)]],
            first="SET LOCAL statement_timeout = %s; ", first_params=[settings.RELAY_SMTP_STORE_SECONDS * 1000])
        content.id, live = cursor.fetchone()
        live = {id_field.to_python(mailbox_id) for mailbox_id in live}
        if not live:
            raise _NoneLive()
        messages = [message for message in messages if message.mailbox_id in live]
        for message in messages:
            message.content_id = content.id
        message_columns, message_values, message_params = _rows(
            messages, database_now=True, thread="(SELECT id FROM chosen WHERE mailbox_id = %s::uuid)",
            thread_params=lambda message: [id_field.get_db_prep_value(message.mailbox_id, connection)])
        live_ids = [id_field.get_db_prep_value(mailbox_id, connection) for mailbox_id in live]
        keys = lineage.keys
        # Each key named, not an array: a prepared statement's one plan must use the index.
        keyed = f"key IN ({_placeholders(keys)})" if keys else "false"
        execute_prepared(
            cursor, f"relay_store_messages_{len(messages)}_{len(keys)}",
            "WITH live(mailbox_id) AS (SELECT unnest(%s::uuid[])),"
            f" found AS (SELECT mailbox_id, thread_id FROM {ThreadKey._meta.db_table}"
            f"   WHERE mailbox_id IN ({_placeholders(live_ids, '::uuid')}) AND {keyed}"
            "   UNION SELECT mailbox_id, %s::bigint FROM live WHERE %s::bigint IS NOT NULL),"
            " target AS (SELECT mailbox_id, min(thread_id) AS id, array_agg(thread_id) AS threads FROM found"
            "   GROUP BY mailbox_id),"
            f" started AS (INSERT INTO {Thread._meta.db_table} (mailbox_id, subject, created_at)"
            "   SELECT mailbox_id, %s::text, now() FROM live WHERE mailbox_id NOT IN (SELECT mailbox_id FROM target)"
            "   RETURNING mailbox_id, id),"
            " chosen AS (SELECT mailbox_id, id FROM target UNION ALL SELECT mailbox_id, id FROM started),"
            f" new_keys AS (INSERT INTO {ThreadKey._meta.db_table} (mailbox_id, key, thread_id)"
            "   SELECT chosen.mailbox_id, k.key, chosen.id FROM chosen CROSS JOIN unnest(%s::varchar[]) AS k(key)"
            "   ON CONFLICT (mailbox_id, key) DO NOTHING)"
            f" INSERT INTO {Message._meta.db_table} AS message ({message_columns}) VALUES {message_values}"
            " RETURNING mailbox_id, id, received_at, thread_id,"
            "   (SELECT threads FROM target WHERE target.mailbox_id = message.mailbox_id)",
            [live_ids, *live_ids, *keys, joining, joining, topic(subject), keys, *message_params])
        stored = {id_field.to_python(mailbox_id): rest for mailbox_id, *rest in cursor.fetchall()}
    for message in messages:
        message.id, message.received_at, message.thread_id, found = stored[message.mailbox_id]
        if len(found or ()) > 1:  # keys that led to several threads: rare, merged on their own
            threads_merge(into=message.thread_id, others=set(found) - {message.thread_id})
    return messages


def _placeholders(values: list, cast: str = "") -> str:
    return ", ".join([f"%s{cast}"] * len(values))


def _store_step_by_step(content: MessageContent, messages: list[Message], recipients: list[Recipient], *,
                        lineage: Lineage, subject: str, joining: int | None) -> list[Message]:
    """The portable path (SQLite): count the message against each quota, insert the
    content, file the message in its threads (mailboxes/threads.py), insert the messages."""
    live = _count_one_more_message(recipients, len(content.raw))
    if not live:
        raise _NoneLive()
    _insert([content])
    threads = threads_assign(mailbox_ids=[r.mailbox_id for r in recipients if r.mailbox_id in live],
                             lineage=lineage, subject=subject, joining=joining)
    messages = [message for message in messages if message.mailbox_id in live]
    for message in messages:
        message.content, message.thread_id = content, threads[message.mailbox_id]
    _insert(messages)
    return messages


def _columns(model) -> list:
    return [field for field in model._meta.concrete_fields if not field.primary_key]


def _rows(rows: list, *, database_now: bool = False, thread: str | None = None,
          thread_params=None) -> tuple[str, str, list]:
    """The columns, VALUES and parameters that INSERT `rows` as the ORM would; with
    `database_now`, auto_now_add times are the database's now()."""
    fields = _columns(rows[0])
    quote = connection.ops.quote_name
    values, params = [], []
    for row in rows:
        placeholders = []
        for field in fields:
            if database_now and getattr(field, "auto_now_add", False):
                placeholders.append("now()")
            elif thread is not None and field.name == "thread":
                placeholders.append(thread)
                params += thread_params(row)
            else:
                placeholders.append("%s")
                params.append(field.get_db_prep_save(field.pre_save(row, True), connection))
        values.append(f"({', '.join(placeholders)})")
    return ", ".join(quote(field.column) for field in fields), ", ".join(values), params


def _insert(rows: list) -> None:
    """INSERT `rows` (instances of one model, without ids) in one statement and set their
    ids, as bulk_create does without building its query anew each time."""
    meta = rows[0]._meta
    columns, values, params = _rows(rows)
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES {values} RETURNING {quote(meta.pk.column)}",
                       params)
        ids = sorted(row[0] for row in cursor.fetchall())
    # Identity ids are handed out in the order of the VALUES: sorted, they match the rows.
    for row, row_id in zip(rows, ids):
        row.id = row_id


def _count_one_more_message(recipients: list[Recipient], size: int) -> set:
    """Count the message against each mailbox still there with room for it: the liveness
    check, the quota check and the counters in one statement; returns their ids."""
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


# --- changes to a stored message ---------------------------------------------------------------
def message_mark_read(*, message: Message) -> None:
    if not message.is_read:
        Message.objects.filter(id=message.id).update(is_read=True)
        message.is_read = True


def message_delete(*, mailbox: Mailbox, message_id: int) -> bool:
    """Delete one message of `mailbox`, keep message_count and stored_bytes in step, and
    drop its content once no other recipient's message shares it."""
    with transaction.atomic():
        message = Message.objects.filter(mailbox=mailbox, id=message_id).only("content_id", "size").first()
        if message is None:
            return False
        message.delete()
        Mailbox.objects.filter(id=mailbox.id, message_count__gt=0).update(
            message_count=F("message_count") - 1, stored_bytes=Greatest(F("stored_bytes") - message.size, 0))
        MessageContent.objects.filter(id=message.content_id, messages__isnull=True).delete()
    return True


# --- its search words --------------------------------------------------------------------------
# The text a message's words are taken from stops here: a 10 MB body would make a
# tsvector past PostgreSQL's 1 MB limit, and nobody searches that deep.
WORDS_TEXT_MAX = 100_000


# The contents one transaction of contents_index_words takes: short enough that a search
# waiting behind a worker's batch waits a fraction of a second (docs/benchmarks.md).
WORDS_BATCH = 200


def contents_index_words(*, messages: QuerySet | None = None, skip_locked: bool = False,
                         limit: int = WORDS_BATCH) -> int:
    """Write MessageContent.words for up to `limit` contents that owe them (those of
    `messages`, or any); returns how many. Each content is locked while written: a search
    waits for a worker holding its rows, a worker (`skip_locked`) passes over them."""
    if not keeps_search_words():
        return 0
    owed = MessageContent.objects.filter(words__isnull=True)
    if messages is not None:
        owed = owed.filter(id__in=messages.values("content_id"))
    with transaction.atomic():
        rows = list(owed.select_for_update(skip_locked=skip_locked).order_by("id")
                    .values_list("id", "text", "html")[:limit])
        if not rows:
            return 0
        # Every recipient's Message of one DATA has the same subject: any one will do.
        subjects = dict(Message.objects.filter(content_id__in=[row[0] for row in rows])
                        .values_list("content_id", "subject"))
        values = []
        for content_id, text, html in rows:
            values += [content_id, subjects.get(content_id, ""), (text or text_of_html(html))[:WORDS_TEXT_MAX]]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {MessageContent._meta.db_table} AS c"
                " SET words = to_tsvector('simple'::regconfig, v.subject || ' ' || v.body)"
                f" FROM (VALUES {', '.join(['(%s::bigint, %s::text, %s::text)'] * len(rows))}) AS v (id, subject, body)"
                " WHERE c.id = v.id",
                values,
            )
    return len(rows)


# Written out: every word search asks it, and building it with the ORM cost more than
# PostgreSQL's answer (docs/benchmarks.md, "Message search"). An owner's words-alone
# search asks instead, of that owner's messages only, in its own statement
# (relay.reading.OwnerWordSearch).
_ANY_WORDS_OWED = f"SELECT 1 FROM {MessageContent._meta.db_table} WHERE words IS NULL LIMIT 1"


def contents_index_all_words(*, messages: QuerySet) -> int:
    """contents_index_words for every content of `messages` that owes its words, batch by
    batch: what a word search calls first (one read of the owed index when none are owed)."""
    if not keeps_search_words():
        return 0
    with connection.cursor() as cursor:
        cursor.execute(_ANY_WORDS_OWED)
        if cursor.fetchone() is None:
            return 0
    total = 0
    while indexed := contents_index_words(messages=messages):
        total += indexed
    return total
