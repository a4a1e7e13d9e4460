"""A mailbox's live reads, for every door that holds a client open: the wait for mail to
match (the API's `?wait=`, MCP's wait_for_message and wait_for_code) and the mailbox's
event stream (the API's `/events`, the web inbox's live list). Each door parses its own
input, authenticates its own way and draws a message its own way; the loop, its wake-ups
(core.live.Hub on `relay:mailbox:*` and revocations) and the cap on a caller's open waits
are here once. Every database call runs in the shared pool, never on the event loop."""
import json
import logging
import time
from collections.abc import AsyncIterator, Callable

from django.conf import settings

from accounts import identity
from accounts.identity import Caller
from core.clock import db_now
from core.live import Hub, OpenWait
from core.pools import in_pool
from mailboxes import wakeups
from mailboxes.errors import Forbidden, RateLimited, RelayError
from mailboxes.messages import message_mark_read
from mailboxes.models import Direction, Mailbox
from relay import reading
from relay.outbox.delivery import DeliveryNews

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15.0
# A look reads at most this many messages; a stream looks again at once while there are more.
BATCH = 50
RETRY_AFTER_SECONDS = 5

hub = Hub(prefix=wakeups.CHANNEL_PREFIX, everyone=identity.REVOKED_CHANNEL)


def caller_key(caller: Caller) -> str:
    """Who the open-wait cap counts: the account (all its keys together), or the anonymous
    mailbox's token."""
    return f"account:{caller.owner.pk}" if caller.owner is not None else f"token:{caller.mailbox_id}"


def open_wait(caller: Caller) -> OpenWait:
    """A place among the caller's open waits; RateLimited past RELAY_MAX_OPEN_WAITS."""
    place = OpenWait(caller_key(caller))
    if not place.take():
        logger.info("refused a wait of %s: %d already open", place.ident, settings.RELAY_MAX_OPEN_WAITS)
        raise RateLimited(f"At most {settings.RELAY_MAX_OPEN_WAITS} waits and event streams may be open at once "
                          "per account or mailbox token; close one first.", retry_after=RETRY_AFTER_SECONDS)
    return place


def open_fresh(caller: Caller, mailbox_id, after: int = 0) -> Mailbox:
    """Open the mailbox for a wait or a stream, with the mail server's newest deliveries;
    later news comes by the poll's wake-up."""
    return reading.mailbox_open(caller=caller, mailbox_id=mailbox_id, after=after, fresh=True)


def messages_after(mailbox: Mailbox, after: int, search: dict, answer: Callable):
    """`answer(rows)` of what a wait or a stream is about: mail received after `after`
    matching `search` (sent mail only if asked for)."""
    search = {**search, "direction": search.get("direction") or Direction.IN}
    with reading.messages_read(caller=None, mailbox=mailbox, search=search) as rows:
        return answer(rows.filter(id__gt=after))


def _seconds_until(moment) -> float:
    """Seconds from now to `moment` by the database's clock, which decides when a mailbox
    ends: a waiter wakes at its end however this host's clock stands."""
    return (moment - db_now()).total_seconds()


def _looked(authenticate: Callable[[], Caller], mailbox_id, look: Callable, *args):
    """The mailbox now (MailboxExpired once it ended), opened once, and `look(mailbox, *args)`;
    the caller authenticated again first, so a revoked key is refused."""
    mailbox = reading.mailbox_open(caller=authenticate(), mailbox_id=mailbox_id)
    return mailbox, look(mailbox, *args)


# --- a wait ------------------------------------------------------------------------------------
async def wait_until_found(*, caller: Caller, authenticate: Callable[[], Caller], mailbox_id, seconds: float,
                           look: Callable):
    """(mailbox, found): `look(mailbox)` until it finds something or `seconds` pass, woken by
    the mailbox's channel, a place among the caller's open waits held meanwhile. The first
    look trusts `caller`; each later one authenticates again. Raises what opening the
    mailbox raises (MailboxExpired once it ends), and what `authenticate` raises."""
    deadline = time.monotonic() + seconds
    place = await in_pool(open_wait)(caller)
    try:
        event = hub.register(mailbox_id)
        try:
            who = lambda: caller  # noqa: E731 (just authenticated: the first look need not again)
            while True:
                mailbox, found = await in_pool(_looked)(who, mailbox_id, look)
                who = authenticate
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return mailbox, found
                until_expiry = await in_pool(_seconds_until)(mailbox.expires_at) + 0.05
                await hub.wait(event, min(left, max(until_expiry, 0.0)))
        finally:
            hub.unregister(mailbox_id, event)
    finally:
        place.give_back()  # one quick Redis call


def _first_now(mailbox: Mailbox, cursor: list[int], search: dict, with_code: bool, render: Callable):
    """The oldest message after `cursor[0]` matching `search` (with a code, if `with_code`:
    the cursor moves past those without), marked read and drawn by `render`; None if none."""
    candidates = messages_after(mailbox, cursor[0], search, lambda rows: list(
        rows.order_by("id").select_related("content").defer("content__raw")[:BATCH]))
    for message in candidates:
        if with_code and not message.content.codes:
            cursor[0] = message.id
            continue
        message_mark_read(message=message)
        return render(message)
    return None


async def first_message(*, caller: Caller, authenticate: Callable[[], Caller], mailbox_id, seconds: float,
                        search: dict, with_code: bool = False, render: Callable):
    """The first message matching `search` (relay.reading.search_checked's), held up to `seconds`:
    marked read and drawn by `render(message)`, or None. MCP's wait_for_message and
    wait_for_code."""
    search = dict(search)
    after = search.pop("after") or 0
    await in_pool(open_fresh)(caller, mailbox_id, after)
    cursor = [after]
    _, found = await wait_until_found(caller=caller, authenticate=authenticate, mailbox_id=mailbox_id,
                                      seconds=seconds, look=lambda mailbox: _first_now(
                                          mailbox, cursor, search, with_code, render))
    return found


# --- an event stream -------------------------------------------------------------------------------
def sse(event: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _newest_id(caller: Caller, mailbox_id) -> int:
    mailbox = reading.mailbox_open(caller=caller, mailbox_id=mailbox_id)
    return reading.message_list(mailbox=mailbox).values_list("id", flat=True).first() or 0


async def events_open(*, caller: Caller, mailbox_id, after: int | None) -> tuple[int, OpenWait]:
    """What a stream needs before its first byte, so that a wrong id is a plain 404/410
    and one too many a 429: the mailbox opened fresh, where to start (after `after`, else
    after its newest message now) and a place among the caller's open waits."""
    await in_pool(open_fresh)(caller, mailbox_id)
    if after is None:
        after = await in_pool(_newest_id)(caller, mailbox_id)
    return after, await in_pool(open_wait)(caller)


async def events(*, authenticate: Callable[[], Caller], mailbox_id, after: int, place: OpenWait,
                 look: Callable[[Mailbox, int], list[tuple[int, dict]]],
                 ended: Callable[[], dict]) -> AsyncIterator[str]:
    """The mailbox's text/event-stream from `events_open`'s start: `event: message` for each
    (id, data) `look(mailbox, after)` finds (oldest first, at most BATCH), `event: delivery`
    for each change of a sent message's recipient from then on, a comment every
    HEARTBEAT_SECONDS, and `event: expired` with `ended()` once the mailbox ends, which
    closes it; a caller `authenticate` refuses (Forbidden) closes it with a comment."""
    event = hub.register(mailbox_id)
    last_sent = time.monotonic()
    deliveries = DeliveryNews(await in_pool(db_now)())
    try:
        yield ": connected\n\n"
        while True:
            try:
                mailbox, found = await in_pool(_looked)(authenticate, mailbox_id, look, after)
            except Forbidden as exc:
                # The key was revoked, or its account suspended, while the stream was open.
                logger.info("closed an event stream of mailbox %s: %s", mailbox_id, exc)
                yield f": {' '.join(str(exc).split())}\n\n"
                return
            except RelayError:
                yield sse("expired", await in_pool(ended)())
                return
            for message_id, data in found:
                after = message_id
                yield sse("message", data, message_id)
                last_sent = time.monotonic()
            # What became of mail the mailbox sent (docs/delivery.md): no id, so a resumed
            # stream's Last-Event-ID stays the last message's.
            for data in await in_pool(deliveries.read)(mailbox.id):
                yield sse("delivery", data)
                last_sent = time.monotonic()
            if len(found) >= BATCH:
                continue  # more are waiting
            if time.monotonic() - last_sent >= HEARTBEAT_SECONDS:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
                await in_pool(place.renew)()
            until_expiry = await in_pool(_seconds_until)(mailbox.expires_at) + 0.05
            heartbeat_in = HEARTBEAT_SECONDS - (time.monotonic() - last_sent)
            await hub.wait(event, max(0.0, min(until_expiry, heartbeat_in)))
    finally:
        hub.unregister(mailbox_id, event)
        place.give_back()
