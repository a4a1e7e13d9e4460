"""The one entry every door (the API, MCP, the web inbox) calls to check a message of a
mailbox the caller has opened (relay.reading.mailbox_open)."""
from checks import links
from checks.headers import headers_report
from checks.html_support import html_report
from checks.spam import spam_report
from mailboxes.mail_format import whole_html
from mailboxes.models import Mailbox
from relay import reading

KINDS = ("html", "links", "spam", "headers")


def html_check(*, mailbox: Mailbox, message_id: int) -> dict:
    return html_of(reading.message_raw(mailbox=mailbox, message_id=message_id))


def html_of(raw: bytes) -> dict:
    """The HTML whole, as received (the stored copy is cut at MAX_BODY_BYTES), for a door
    that holds the raw bytes already (for spamd too)."""
    return html_report(whole_html(raw))


def headers_check(*, mailbox: Mailbox, message_id: int) -> dict:
    content = reading.message_get(mailbox=mailbox, message_id=message_id).content
    return headers_report(content.headers, content.authentication or {})


async def spam_check(*, raw: bytes) -> dict:
    """The score of a message's bytes (reading.message_raw): spamd is called on the event loop."""
    return await spam_report(raw)


def links_start(*, mailbox: Mailbox, message_id: int) -> dict:
    return links.check_answer(links.links_check_start(reading.message_get(mailbox=mailbox, message_id=message_id)))


def links_result(*, mailbox: Mailbox, message_id: int) -> dict:
    return links.check_answer(links.links_check_get(reading.message_get(mailbox=mailbox, message_id=message_id)))
