"""The one entry every door (the API, MCP, the web inbox) calls to check a message of a
mailbox the caller has opened (relay.reading.mailbox_open)."""
from collections.abc import Callable

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache

from checks import bounds, links
from checks.headers import headers_report
from checks.html_support import data, html_report
from checks.spam import spam_report
from mailboxes.mail_format import whole_html
from mailboxes.models import Mailbox
from relay import reading

KINDS = ("html", "links", "spam", "headers")
HTML_CHECK_CACHE_SECONDS = 3600


def html_check(*, mailbox: Mailbox, message_id: int) -> dict:
    content_id = reading.message_get(mailbox=mailbox, message_id=message_id).content_id
    return html_of(lambda: reading.message_raw(mailbox=mailbox, message_id=message_id), content_id=content_id)


def html_of(raw: bytes | Callable[[], bytes], *, content_id: int) -> dict:
    """The HTML whole, as received (the stored copy is cut at MAX_BODY_BYTES), checked once
    per content (a message's content never changes) and kept in the shared cache for
    HTML_CHECK_CACHE_SECONDS: the Checks tab, the API and the MCP tool ask again and again.
    `raw` is the bytes, or how to read them when the cache has no answer."""
    key = f"relay:html-check:{settings.RELAY_VERSION}:{data()['date']}:{content_id}"
    found = cache.get(key)
    if found is None:
        found = html_report(whole_html(raw() if callable(raw) else raw))
        cache.set(key, found, HTML_CHECK_CACHE_SECONDS)
    return found


def headers_check(*, mailbox: Mailbox, message_id: int) -> dict:
    content = reading.message_get(mailbox=mailbox, message_id=message_id).content
    return headers_report(content.headers, content.authentication or {})


def spam_check(*, mailbox: Mailbox, raw: bytes) -> dict:
    """The score of a message's bytes (reading.message_raw), within the caller's bounds
    (checks.bounds). The calling thread waits for spamd (up to RELAY_SPAMD_TIMEOUT_SECONDS):
    a door calls this in a pool of its own, never in one other callers need."""
    caller = bounds.caller_of(mailbox)
    bounds.rate_take(kind="spam", caller=caller, per_minute=settings.RELAY_SPAM_CHECKS_PER_MINUTE)
    with bounds.at_once(kind="spam", caller=caller, limit=settings.RELAY_SPAM_CHECKS_AT_ONCE,
                        lease=settings.RELAY_SPAMD_TIMEOUT_SECONDS + 5):
        return async_to_sync(spam_report)(raw)


def links_start(*, mailbox: Mailbox, message_id: int) -> dict:
    """Start a link check (or find the one under way), within the caller's bounds: at most
    RELAY_LINK_CHECKS_AT_ONCE under way for its account, RELAY_LINK_CHECKS_PER_MINUTE started."""
    message = reading.message_get(mailbox=mailbox, message_id=message_id)
    return links.check_answer(links.links_check_start(message, caller=bounds.caller_of(mailbox)))


def links_result(*, mailbox: Mailbox, message_id: int) -> dict:
    return links.check_answer(links.links_check_get(reading.message_get(mailbox=mailbox, message_id=message_id)))
