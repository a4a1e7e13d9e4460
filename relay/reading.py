"""Opening a mailbox to read it: the one entry every door calls (the API's views, its held
waits and event streams, the MCP tools), so that none restates what a read owes first.

In order: the caller may see the mailbox (NotFound otherwise, exactly as a missing one);
a mailbox past its time is expired on the spot (mailboxes.access); a read that needs it
live gets MailboxExpired once it ended; a cursor (`after`) must be one of its messages;
and, where a mail server holds the mail, what it delivered a moment ago is read first
(relay.mailserver), after the ownership check, so nothing is ever read for a mailbox the
caller may not see."""
from django.db.models import QuerySet

from mailboxes import access, selectors
from mailboxes.keys import Caller
from mailboxes.models import Mailbox
from relay import mailserver


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
