"""What a caller opens, each read preceded by the write it owes: a due mailbox expired on
the spot, a word search's owed words written."""
from django.db import connection
from django.db.models import QuerySet

from mailboxes.ending import mailbox_lazy_expire, mailboxes_lazy_expire
from mailboxes.errors import MailboxExpired
from mailboxes.keys import Caller
from mailboxes.models import Mailbox, MailboxStatus
from mailboxes.queries import (OwnerWordSearch, mailbox_find, mailboxes_filtered, mailboxes_visible_to,
                                 messages_in_scope, messages_matching)
from mailboxes.changes import contents_index_all_words


def mailbox_list(*, caller: Caller, **filters) -> QuerySet:
    """The caller's mailboxes, those due expired first, filtered as
    selectors.mailboxes_filtered takes them."""
    visible = mailboxes_visible_to(caller)
    mailboxes_lazy_expire(mailboxes=visible)
    return mailboxes_filtered(visible, **filters)


def mailbox_get(*, caller: Caller, mailbox_id) -> Mailbox:
    """The caller's mailbox, expired on the spot if it is due (NotFound as mailbox_find)."""
    mailbox = mailbox_find(caller=caller, mailbox_id=mailbox_id)
    return mailbox_lazy_expire(mailbox=mailbox, now=mailbox.read_at)


def mailbox_get_active(*, caller: Caller, mailbox_id) -> Mailbox:
    """For operations that need a live mailbox (messages, renew, send)."""
    mailbox = mailbox_get(caller=caller, mailbox_id=mailbox_id)
    if mailbox.status != MailboxStatus.ACTIVE:
        raise MailboxExpired()
    return mailbox


def message_search(*, caller: Caller | None, mailbox: Mailbox | None = None, words: str = "",
                   after: int | None = None, **filters) -> QuerySet:
    """Messages in `mailbox` or all the caller's matching every filter, newest first, the
    words they owe written first."""
    messages = messages_in_scope(caller=caller, mailbox=mailbox)
    if words and connection.vendor == "postgresql":
        contents_index_all_words(messages=messages.filter(id__gt=after) if after else messages)
    return messages_matching(messages, words=words, after=after, **filters)


def message_search_pages(*, caller: Caller | None, mailbox: Mailbox | None = None, words: str = "",
                         after: int | None = None, **filters) -> "QuerySet | OwnerWordSearch":
    """What a client pages through: message_search's rows, or an owner's words-alone search
    as a queries.OwnerWordSearch, the owed words written first."""
    if (words and mailbox is None and after is None and caller is not None and caller.owner is not None
            and not any(filters.values()) and connection.vendor == "postgresql"):
        contents_index_all_words(messages=messages_in_scope(caller=caller))
        return OwnerWordSearch(owner_id=caller.owner.id, words=words)
    return message_search(caller=caller, mailbox=mailbox, words=words, after=after, **filters)
