"""Reading a mailbox: the one entry every door calls (the API's views, its held waits and
event streams, the MCP tools), so that none restates what a read owes first. Opening a
mailbox (mailbox_open), and searching its messages (messages_read).

In order: the caller may see the mailbox (NotFound otherwise, exactly as a missing one);
a mailbox past its time is expired on the spot (mailboxes.access); a read that needs it
live gets MailboxExpired once it ended; a cursor (`after`) must be one of its messages;
and, where a mail server holds the mail, what it delivered a moment ago is read first
(relay.mailserver), after the ownership check, so nothing is ever read for a mailbox the
caller may not see."""
from collections.abc import Callable
from typing import TypeVar

from django.db.models import QuerySet

from mailboxes import access, selectors
from mailboxes.keys import Caller
from mailboxes.models import Mailbox
from relay import mailserver

Answer = TypeVar("Answer")


def mailbox_open(*, caller: Caller, mailbox_id, live: bool = True, fresh: bool = False,
                 after: int | None = None) -> Mailbox:
    """The caller's mailbox, for reading or acting on it. `live`: it must not have ended
    (MailboxExpired). `after`: a cursor that must be one of its messages (InvalidRequest).
    `fresh`: the mail server's newest deliveries are read into it first."""
    mailbox = (access.mailbox_get_active if live else access.mailbox_get)(caller=caller, mailbox_id=mailbox_id)
    if after:
        selectors.message_cursor_check(messages=selectors.message_list(mailbox=mailbox), after=after)
    if fresh:
        mailserver.read_now(Mailbox.objects.filter(id=mailbox.id))
    return mailbox


def mailboxes_freshen(caller: Caller) -> QuerySet:
    """Before a read across all the caller's mailboxes (a search): the mail server's
    newest deliveries into them are read first. Returns the mailboxes the caller sees."""
    visible = selectors.mailboxes_visible_to(caller)
    mailserver.read_now(visible)
    return visible


def messages_read(*, caller: Caller | None, search: dict, answer: Callable[[QuerySet], Answer],
                  mailbox: Mailbox | None = None, pages: bool = False) -> Answer:
    """The messages in `mailbox` (or all the caller's) matching `search`
    (mailboxes.access.message_search's filters), turned into the door's answer by
    `answer(rows)` under the word search's plan: the words they owe written first, the
    rows read through the words' index. `pages`: the rows a client pages through
    (access.message_search_pages)."""
    rows = (access.message_search_pages if pages else access.message_search)(caller=caller, mailbox=mailbox, **search)
    with selectors.words_search_plan(search.get("words", "")):
        return answer(rows)
