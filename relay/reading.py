"""Reading a mailbox, the one entry every door calls: open it (ownership, lazy expiry, the
live check, a cursor, then the mail server's newest mail) and search its messages."""
from collections.abc import Callable
from typing import TypeVar

from django.db.models import QuerySet

from mailboxes import caller_reads, queries
from mailboxes.keys import Caller
from mailboxes.models import Mailbox
from relay import mailserver

Answer = TypeVar("Answer")


def mailbox_open(*, caller: Caller, mailbox_id, live: bool = True, fresh: bool = False,
                 after: int | None = None) -> Mailbox:
    """The caller's mailbox (`live`: MailboxExpired once ended; `after`: a cursor of its
    messages; `fresh`: the mail server's newest deliveries read first)."""
    mailbox = (caller_reads.mailbox_get_active if live else caller_reads.mailbox_get)(caller=caller, mailbox_id=mailbox_id)
    if after:
        queries.message_cursor_check(messages=queries.message_list(mailbox=mailbox), after=after)
    if fresh:
        mailserver.read_now(Mailbox.objects.filter(id=mailbox.id))
    return mailbox


def mailboxes_freshen(caller: Caller) -> QuerySet:
    """Before a read across all the caller's mailboxes (a search): the mail server's
    newest deliveries into them are read first. Returns the mailboxes the caller sees."""
    visible = queries.mailboxes_visible_to(caller)
    mailserver.read_now(visible)
    return visible


def messages_read(*, caller: Caller | None, search: dict, answer: Callable[[QuerySet], Answer],
                  mailbox: Mailbox | None = None, pages: bool = False) -> Answer:
    """The messages in `mailbox` (or all the caller's) matching `search`, made into the door's
    answer by `answer(rows)` under the word search's plan (`pages`: the rows a client pages)."""
    rows = (caller_reads.message_search_pages if pages else caller_reads.message_search)(caller=caller, mailbox=mailbox, **search)
    with queries.words_search_plan(search.get("words", "")):
        return answer(rows)
