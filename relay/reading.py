"""Reading a mailbox, the one entry every door calls: open it (ownership, lazy expiry, the
live check, a cursor, then the mail server's newest mail), list a caller's mailboxes and
search their messages, each read preceded by the write it owes (a due mailbox expired on
the spot, a word search's owed words written); and below the entry, the reads themselves
as a caller may see them, none of which writes."""
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Count, Q, QuerySet

from accounts.identity import Caller
from mailboxes.errors import InvalidRequest, MailboxExpired, NotFound
from mailboxes.lifecycle import mailboxes_expire_due
from mailboxes.mail_format import NOT_ONE_LINE, breaks_line
from mailboxes.messages import contents_index_all_words
from mailboxes.models import Mailbox, MailboxStatus, Message, MessageContent, shown_sender
from core.clock import db_now
from core.storage import (clock_read, clock_sql, json_list_has, keeps_search_words, under_words_plan, words_match,
                          words_plan)
from relay import mailserver
from relay.backends import mail_store

# --- the entry ------------------------------------------------------------------------------------
# What a search's text filters take, and the names callers give them (the API's query
# parameters are declared from these; MCP's tools check their arguments by search_checked).
SEARCH_TEXT_MAX = {"words": 200, "sender": 320, "subject": 200, "rcpt": 320}
SEARCH_TEXT_NAMES = {"words": "q", "sender": "from", "subject": "subject", "rcpt": "rcpt"}
AFTER_MAX = 10 ** 18 - 1


def mailbox_open(*, caller: Caller, mailbox_id, live: bool = True, fresh: bool = False,
                 after: int | None = None) -> Mailbox:
    """The caller's mailbox, expired on the spot if it is due (NotFound as
    mailbox_find; `live`: MailboxExpired once ended; `after`: a cursor of its
    messages; `fresh`: the mail server's newest deliveries read first)."""
    mailbox = mailbox_find(caller=caller, mailbox_id=mailbox_id)
    mailbox = mailbox_lazy_expire(mailbox=mailbox, now=mailbox.read_at)
    if live and mailbox.status != MailboxStatus.ACTIVE:
        raise MailboxExpired()
    if after:
        message_cursor_check(messages=message_list(mailbox=mailbox), after=after)
    if fresh:
        mailserver.read_now(Mailbox.objects.filter(id=mailbox.id))
    return mailbox


def mailbox_list(*, caller: Caller, **filters) -> QuerySet:
    """The caller's mailboxes, those due expired first, filtered as
    mailboxes_filtered takes them."""
    visible = mailboxes_visible_to(caller)
    mailboxes_lazy_expire(mailboxes=visible)
    return mailboxes_filtered(visible, **filters)


def mailbox_lazy_expire(*, mailbox: Mailbox, now: datetime | None = None) -> Mailbox:
    """A due mailbox expired on the spot, as every door opens it, so correctness never
    waits for a worker. Returns the mailbox as it now stands."""
    now = now or db_now()
    if mailbox.is_due(now):
        mailboxes_expire_due(mailbox_ids=[mailbox.id], now=now)
        mailbox.refresh_from_db(fields=["status", "expired_at", "cleanup_state"])
    return mailbox


# Lazy expiry of a whole list runs in batches of this many, so one list of thousands of
# due mailboxes never becomes one huge `id IN (...)` and one long transaction.
LAZY_EXPIRE_BATCH = 500


def mailboxes_lazy_expire(*, mailboxes, now: datetime | None = None) -> int:
    """Lazy expiry for a queryset of mailboxes about to be listed. Returns how many it ended."""
    now = now or db_now()
    ended = 0
    while True:
        due = list(mailboxes.due(now).values_list("id", flat=True)[:LAZY_EXPIRE_BATCH])
        if not due:
            return ended
        ended += len(mailboxes_expire_due(mailbox_ids=due, now=now))
        if len(due) < LAZY_EXPIRE_BATCH:
            return ended


def mailboxes_freshen(caller: Caller) -> None:
    """Before a read across all the caller's mailboxes (a search): the mail server's
    newest deliveries into them are read first (nothing to read where Relay's own SMTP
    stores the mail)."""
    if mail_store() is not None:
        mailserver.read_now(mailboxes_visible_to(caller))


def message_search(*, caller: Caller | None, mailbox: Mailbox | None = None, words: str = "",
                   after: int | None = None, **filters) -> QuerySet:
    """Messages in `mailbox` or all the caller's matching every filter, newest first, the
    words they owe written first."""
    messages = messages_in_scope(caller=caller, mailbox=mailbox)
    if words:
        contents_index_all_words(messages=messages.filter(id__gt=after) if after else messages)
    return messages_matching(messages, words=words, after=after, **filters)


def _message_search_pages(*, caller: Caller | None, mailbox: Mailbox | None = None, words: str = "",
                          after: int | None = None, **filters) -> "QuerySet | OwnerWordSearch":
    """What a client pages through: message_search's rows (the owed words written first), or
    an owner's words-alone search as an OwnerWordSearch, which writes those it finds owed."""
    if (words and mailbox is None and after is None and caller is not None and caller.owner is not None
            and not any(filters.values()) and keeps_search_words()):
        return OwnerWordSearch(owner_id=caller.owner.id, words=words)
    return message_search(caller=caller, mailbox=mailbox, words=words, after=after, **filters)


def search_checked(*, words: str | None = None, sender: str | None = None, subject: str | None = None,
                   unread: bool = False, authenticated: bool = False, after: int | None = None,
                   direction: str = "", rcpt: str | None = None) -> dict:
    """A search as messages_read takes it, from a door's typed arguments, each checked as the
    API checks its query: text one line and not empty, trimmed, within SEARCH_TEXT_MAX;
    `after` within AFTER_MAX. InvalidRequest names the filter as the API does (its
    message, as DRF's, does not repeat the name)."""
    search = {"unread": unread, "authenticated": authenticated, "after": after, "direction": direction or ""}
    for name, value in (("words", words), ("sender", sender), ("subject", subject), ("rcpt", rcpt)):
        search[name] = "" if value is None else search_text(name, value)
    if after is not None:
        search_after(after)
    return search


def search_after(value: int) -> int:
    """`after`, a message's id, as every door takes it: within AFTER_MAX."""
    if not 1 <= value <= AFTER_MAX:
        raise InvalidRequest(f"must be between 1 and {AFTER_MAX}.", field="after")
    return value


def search_text(name: str, value: str) -> str:
    """A search filter's text (`name`: words, sender or subject) as every door takes it:
    one line, not empty, trimmed, within SEARCH_TEXT_MAX (only white space filters nothing)."""
    field = SEARCH_TEXT_NAMES[name]
    if value == "":
        raise InvalidRequest("may not be empty; leave it out to filter nothing.", field=field)
    if breaks_line(value):
        raise InvalidRequest(NOT_ONE_LINE, field=field)
    value = value.strip()
    if len(value) > SEARCH_TEXT_MAX[name]:
        raise InvalidRequest(f"takes at most {SEARCH_TEXT_MAX[name]} characters.", field=field)
    return value


@contextmanager
def messages_read(*, caller: Caller | None, search: dict, mailbox: Mailbox | None = None,
                  pages: bool = False) -> Iterator[QuerySet]:
    """The messages in `mailbox` (or all the caller's) matching `search` (`pages`: the rows a
    client pages), to be made into the door's answer inside the block, which runs under
    the word search's plan."""
    rows = (_message_search_pages if pages else message_search)(caller=caller, mailbox=mailbox, **search)
    if isinstance(rows, OwnerWordSearch):  # its one statement carries the plan
        yield rows
        return
    with words_search_plan(search.get("words", "")):
        yield rows


# --- the reads, as a caller may see them ----------------------------------------------------------
def mailboxes_visible_to(caller: Caller) -> QuerySet:
    """The caller's mailboxes, deleted and provisioning ones never: another owner's
    mailbox is as absent as one that does not exist."""
    mailboxes = Mailbox.objects.visible()
    if caller.owner is not None:
        return mailboxes.filter(owner=caller.owner)
    return mailboxes.filter(id=caller.mailbox_id)


# The orderings a list may ask for (docs/api.md); the id breaks ties so pages never overlap.
MAILBOX_ORDERINGS = ("created_at", "-created_at", "expires_at", "-expires_at")


def _given(**lookups) -> dict:
    """The lookups whose value the caller gave: None and "" mean "no such filter"."""
    return {lookup: value for lookup, value in lookups.items() if value}


def mailboxes_filtered(visible: QuerySet, *, include_expired: bool = False, status: str | None = None,
                       tags: list[str] = (), text: str = "", created_after: datetime | None = None,
                       created_before: datetime | None = None, ordering: str = "-created_at") -> QuerySet:
    """`visible` filtered by status, tags, text and creation time (docs/api.md), ordered."""
    if status:
        visible = visible.filter(status=status)
    elif not include_expired:
        visible = visible.filter(status=MailboxStatus.ACTIVE)
    for tag in tags:
        visible = visible.filter(_has_tag(tag))
    if text:
        visible = visible.filter(Q(address__icontains=text) | Q(name__icontains=text))
    visible = visible.filter(**_given(created_at__gt=created_after, created_at__lt=created_before))
    tie_break = "-id" if ordering.startswith("-") else "id"
    return visible.order_by(ordering, tie_break)


def _has_tag(tag: str) -> Q:
    return json_list_has("tags", tag)  # tags are [a-z0-9_-] only, as json_list_has asks


# Written out (the ORM's building was much of a GET's time); reads the database's clock
# too, so lazy expiry costs no round trip.
_MAILBOX_BY_ID = (f"SELECT *, {{now}} AS read_at FROM {Mailbox._meta.db_table}"
                  f" WHERE {Mailbox._meta.pk.column} = %s")
_VISIBLE = (MailboxStatus.ACTIVE, MailboxStatus.EXPIRED)


def mailbox_find(*, caller: Caller, mailbox_id) -> Mailbox:
    """The caller's mailbox as stored, with the database's clock (`read_at`); NotFound for
    another owner's, a deleted or a provisioning one."""
    try:
        key = Mailbox._meta.pk.get_db_prep_value(Mailbox._meta.pk.to_python(mailbox_id), connection)
    except ValidationError:
        raise NotFound() from None
    now_sql, now_params = clock_sql()
    mailbox = next(iter(Mailbox.objects.raw(_MAILBOX_BY_ID.format(now=now_sql), [*now_params, key])), None)
    if mailbox is not None:
        mailbox.read_at = clock_read(mailbox.read_at)
    if mailbox is None or mailbox.status not in _VISIBLE or not _visible_to(caller, mailbox):
        raise NotFound()
    return mailbox


def _visible_to(caller: Caller, mailbox: Mailbox) -> bool:
    """mailboxes_visible_to's rule, for one row."""
    if caller.owner is not None:
        return mailbox.owner_id == caller.owner.pk
    return mailbox.id == caller.mailbox_id


def message_list(*, mailbox: Mailbox) -> QuerySet:
    return Message.objects.filter(mailbox=mailbox).order_by("-received_at", "-id")


@contextmanager
def words_search_plan(words: str):
    """Run a word search inside this: the plan that reads the words' index
    (core.storage.words_plan)."""
    if not words:
        yield
        return
    with words_plan():
        yield


def messages_matching(messages: QuerySet, *, words: str = "", sender: str = "", subject: str = "",
                      since: datetime | None = None, until: datetime | None = None, unread: bool = False,
                      authenticated: bool = False, after: int | None = None, direction: str = "",
                      rcpt: str = "") -> QuerySet:
    """Those of `messages` matching every filter (docs/api.md), newest first. `after` must be
    one of them (InvalidRequest); `words` are full-text on PostgreSQL, substrings on SQLite."""
    if after:
        message_cursor_check(messages=messages, after=after)
        # Ids grow with each message stored, so "after" in ids is "received after".
        messages = messages.filter(id__gt=after)
    if words:
        messages = messages.filter(words_match(words, vector="content__words", texts=("subject", "content__text")))
    if sender:
        messages = messages.filter(Q(from_header__icontains=sender) | Q(envelope_from__icontains=sender))
    messages = messages.filter(**_given(subject__icontains=subject, received_at__gte=since, received_at__lt=until))
    if unread:
        messages = messages.filter(is_read=False)
    if authenticated:
        messages = messages.filter(authenticated=True)
    if direction:
        messages = messages.filter(direction=direction)
    if rcpt:
        messages = messages.filter(_has_envelope_recipient(rcpt.lower()))
    return messages.order_by("-received_at", "-id")


def _has_envelope_recipient(address: str) -> Q:
    """A sandbox's catch with `address` among its RCPT TO (kept lowercased), or other mail
    that came to `address`."""
    if connection.vendor == "postgresql":
        caught = Q(rcpt_to__contains=[address])
    else:
        # SQLite has no JSON containment: the quoted address in the stored list, as for tags.
        caught = Q(rcpt_to__icontains=json.dumps(address))
    return caught | Q(envelope_to=address)


class ListedMessage(NamedTuple):
    """A message as a list shows it (api.serializers.MessageSummarySerializer's fields), read
    by OwnerWordSearch's written-out statement as plain values: building a page of model
    instances through a raw queryset cost more of a search's CPU than the statement
    (docs/benchmarks.md). tests/relay/test_search.py holds its rendering to the model's."""

    id: int
    mailbox_id: UUID
    from_header: str
    envelope_from: str
    to_header: str
    envelope_to: str
    rcpt_to_json: str  # the column as the database sends it; rcpt_to is the list
    subject: str
    received_at: datetime
    size: int
    is_read: bool
    has_attachments: bool
    authenticated: bool
    direction: str
    thread_id: int | None
    relay_total: int  # how many match in all

    @property
    def sender(self) -> str:
        return shown_sender(self.from_header, self.envelope_from)

    @property
    def rcpt_to(self) -> list[str]:
        return json.loads(self.rcpt_to_json)


_LISTED_COLUMNS = ", ".join("m.rcpt_to::text" if name == "rcpt_to_json" else f"m.{name}"
                            for name in ListedMessage._fields if name != "relay_total")


class OwnerWordSearch:
    """An owner's search for words alone across all their mailboxes, read a page at a time
    by one written-out statement (the ORM's building cost more than PostgreSQL's answer),
    which also asks whether any of the owner's messages owe their words: in one statement
    the two see one snapshot, so where none is owed its matches are all there are, and the
    search needs no trip of its own to ask first. Where some are owed, they are written
    and the page is read again. Words other owners' mail owes (a second's worth
    while mail arrives) are not this search's to wait for."""

    PAGE = (f"SELECT {_LISTED_COLUMNS}, count(*) OVER () AS relay_total FROM {Message._meta.db_table} m"
            f" JOIN {MessageContent._meta.db_table} c ON c.id = m.content_id"
            " WHERE m.owner_id = %s AND c.words @@ websearch_to_tsquery('simple', %s)"
            " ORDER BY m.received_at DESC, m.id DESC LIMIT %s OFFSET %s")
    OWED = (f"SELECT 1 FROM {MessageContent._meta.db_table} c JOIN {Message._meta.db_table} m"
            " ON m.content_id = c.id WHERE c.words IS NULL AND m.owner_id = %s")
    # Always one row, even for no match: the flag, beside each of the page's rows (all
    # NULL but the flag when there are none). A lateral page skipped when words are owed,
    # or an ORDER BY outside the join, cost PostgreSQL 0.1-0.2 ms more a search than they
    # save (docs/benchmarks.md): the page is sorted again in Python instead.
    PAGE_UNLESS_OWED = (f"SELECT p.*, o.owed AS relay_owed FROM (SELECT EXISTS ({OWED}) AS owed) o"
                        f" LEFT JOIN ({PAGE}) p ON true")

    def __init__(self, *, owner_id: int, words: str) -> None:
        self.owner_id, self.words = owner_id, words

    def page_with_total(self, offset: int, limit: int) -> list[ListedMessage]:
        """Messages offset to offset + limit, each with `relay_total`: how many match in all."""
        parameters = [self.owner_id, self.words, limit, offset]
        with connection.cursor() as cursor:
            cursor.execute(under_words_plan(self.PAGE_UNLESS_OWED), [self.owner_id, *parameters])
            rows = cursor.fetchall()
            if rows[0][-1]:  # relay_owed
                contents_index_all_words(messages=Message.objects.filter(owner_id=self.owner_id))  # OWED's scope
                cursor.execute(under_words_plan(self.PAGE), parameters)
                return [ListedMessage._make(row) for row in cursor.fetchall()]
        # A join's rows keep no order SQL promises.
        page = [ListedMessage._make(row[:-1]) for row in rows if row[0] is not None]
        return sorted(page, key=lambda listed: (listed.received_at, listed.id), reverse=True)


def messages_in_scope(*, caller: Caller | None, mailbox: Mailbox | None = None) -> QuerySet:
    """The messages of `mailbox`, or of all the caller's (expired ones while retained); an
    owner's through Message.owner's index."""
    if mailbox is not None:
        return Message.objects.filter(mailbox=mailbox)
    if caller.owner is not None:
        return Message.objects.filter(owner=caller.owner)
    return Message.objects.filter(mailbox__in=mailboxes_visible_to(caller))


def message_cursor_check(*, messages: QuerySet, after: int) -> None:
    """InvalidRequest naming `after` unless message `after` is one of `messages`."""
    if not messages.filter(id=after).exists():
        raise InvalidRequest(f"Message {after} is not one of these messages.", field="after")


def message_get(*, mailbox: Mailbox, message_id: int) -> Message:
    """One message of `mailbox` with its parsed content (not its raw bytes)."""
    try:
        return Message.objects.select_related("content").defer("content__raw").get(mailbox=mailbox, id=message_id)
    except Message.DoesNotExist:
        raise NotFound() from None


def message_by_id(message_id: int) -> Message | None:
    """Any message with its content, for the operator (who may see every mailbox)."""
    return Message.objects.select_related("content").filter(id=message_id).first()


def message_raw(*, mailbox: Mailbox, message_id: int) -> bytes:
    """The exact bytes received."""
    raw = (MessageContent.objects.filter(messages__mailbox=mailbox, messages__id=message_id)
           .values_list("raw", flat=True).first())
    if raw is None:
        raise NotFound()
    return bytes(raw)


def contents_words_owed() -> int:
    """How many contents still owe their search words (0 on SQLite, which keeps none)."""
    if not keeps_search_words():
        return 0
    return MessageContent.objects.filter(words__isnull=True).count()


def mailbox_counts() -> dict[tuple[str, str], int]:
    """How many mailboxes are in each (status, cleanup state): one index-only pass."""
    rows = Mailbox.objects.order_by().values_list("cleanup_state", "status").annotate(n=Count("*"))
    return {(status, cleanup_state): n for cleanup_state, status, n in rows}
