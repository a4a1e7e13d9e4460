"""Reading a mailbox, the one entry every door calls: open it (ownership, lazy expiry, the
live check, a cursor, then the mail server's newest mail), list a caller's mailboxes and
search their messages, each read preceded by the write it owes (a due mailbox expired on
the spot, a word search's owed words written)."""
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from django.db.models import QuerySet

from mailboxes import queries
from mailboxes.changes import contents_index_all_words
from mailboxes.ending import mailbox_lazy_expire, mailboxes_lazy_expire
from mailboxes.errors import InvalidRequest, MailboxExpired
from mailboxes.keys import Caller
from mailboxes.mail_format import NOT_ONE_LINE, breaks_line
from mailboxes.models import Mailbox, MailboxStatus
from relay import mailserver

# What a search's text filters take, and the names callers give them (the API's query
# parameters are declared from these; MCP's tools check their arguments by search_of).
SEARCH_TEXT_MAX = {"words": 200, "sender": 320, "subject": 200}
SEARCH_TEXT_NAMES = {"words": "q", "sender": "from", "subject": "subject"}
AFTER_MAX = 10 ** 18 - 1


def mailbox_open(*, caller: Caller, mailbox_id, live: bool = True, fresh: bool = False,
                 after: int | None = None) -> Mailbox:
    """The caller's mailbox, expired on the spot if it is due (NotFound as
    queries.mailbox_find; `live`: MailboxExpired once ended; `after`: a cursor of its
    messages; `fresh`: the mail server's newest deliveries read first)."""
    mailbox = queries.mailbox_find(caller=caller, mailbox_id=mailbox_id)
    mailbox = mailbox_lazy_expire(mailbox=mailbox, now=mailbox.read_at)
    if live and mailbox.status != MailboxStatus.ACTIVE:
        raise MailboxExpired()
    if after:
        queries.message_cursor_check(messages=queries.message_list(mailbox=mailbox), after=after)
    if fresh:
        mailserver.read_now(Mailbox.objects.filter(id=mailbox.id))
    return mailbox


def mailbox_list(*, caller: Caller, **filters) -> QuerySet:
    """The caller's mailboxes, those due expired first, filtered as
    queries.mailboxes_filtered takes them."""
    visible = queries.mailboxes_visible_to(caller)
    mailboxes_lazy_expire(mailboxes=visible)
    return queries.mailboxes_filtered(visible, **filters)


def mailboxes_freshen(caller: Caller) -> QuerySet:
    """Before a read across all the caller's mailboxes (a search): the mail server's
    newest deliveries into them are read first. Returns the mailboxes the caller sees."""
    visible = queries.mailboxes_visible_to(caller)
    mailserver.read_now(visible)
    return visible


def message_search(*, caller: Caller | None, mailbox: Mailbox | None = None, words: str = "",
                   after: int | None = None, **filters) -> QuerySet:
    """Messages in `mailbox` or all the caller's matching every filter, newest first, the
    words they owe written first."""
    messages = queries.messages_in_scope(caller=caller, mailbox=mailbox)
    if words and connection.vendor == "postgresql":
        contents_index_all_words(messages=messages.filter(id__gt=after) if after else messages)
    return queries.messages_matching(messages, words=words, after=after, **filters)


def _message_search_pages(*, caller: Caller | None, mailbox: Mailbox | None = None, words: str = "",
                          after: int | None = None, **filters) -> "QuerySet | queries.OwnerWordSearch":
    """What a client pages through: message_search's rows, or an owner's words-alone search
    as a queries.OwnerWordSearch, the owed words written first."""
    if (words and mailbox is None and after is None and caller is not None and caller.owner is not None
            and not any(filters.values()) and connection.vendor == "postgresql"):
        contents_index_all_words(messages=queries.messages_in_scope(caller=caller))
        return queries.OwnerWordSearch(owner_id=caller.owner.id, words=words)
    return message_search(caller=caller, mailbox=mailbox, words=words, after=after, **filters)


def search_of(*, words: str | None = None, sender: str | None = None, subject: str | None = None,
              unread: bool = False, authenticated: bool = False, after: int | None = None,
              direction: str = "") -> dict:
    """A search as messages_read takes it, from a door's typed arguments, each checked as the
    API checks its query: text one line and not empty, trimmed, within SEARCH_TEXT_MAX;
    `after` within AFTER_MAX. InvalidRequest names the filter as the API does (its
    message, as DRF's, does not repeat the name)."""
    search = {"unread": unread, "authenticated": authenticated, "after": after, "direction": direction or ""}
    for name, value in (("words", words), ("sender", sender), ("subject", subject)):
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
    with queries.words_search_plan(search.get("words", "")):
        yield rows
