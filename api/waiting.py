"""Waiting for mail without a thread per waiter (docs/api.md): `GET …/messages?wait=S&after=MID`
and the event stream `GET …/events`. Both are async views; the rest of the API stays
DRF's.

Each web process holds one Redis subscription (`relay:mailbox:*`, mailboxes/wakeups.py) and
wakes the waiters of a mailbox when its channel speaks. A woken waiter reads the
database, which stays the record; every waiter also looks again at least every
`RECHECK_SECONDS`, so a lost event or a Redis outage costs latency, never an answer.
Without Redis, waiters poll every `POLL_SECONDS`."""
import asyncio
import json
import logging
import time
from collections import defaultdict

import redis.asyncio as aioredis
from django.conf import settings
from django.http import HttpResponseNotAllowed, JsonResponse, StreamingHttpResponse
from rest_framework import exceptions

from api.authentication import BearerAuthentication, Principal
from api.errors import error_body, json_error_response
from api.open_waits import OpenWait, caller_key
from api.pooling import in_pool
from accounts import revocations
from api.serializers import EventsQuerySerializer, MessageSummarySerializer, WaitQuerySerializer
from mailboxes import selectors
from mailboxes.errors import Forbidden, RelayError
from mailboxes.models import MailboxStatus
from mailboxes.wakeups import CHANNEL_PREFIX

logger = logging.getLogger(__name__)


def sync_to_async(function):
    """Database work of a waiter, in the event loop's shared thread pool rather than a
    thread of the request's own: hundreds of waiters share a few threads and a few
    database connections, instead of holding one each (api/pooling.py)."""
    return in_pool(function)


POLL_SECONDS = 0.5
# With a live subscription no event is lost, so this is only a backstop; each time the
# subscription (re)connects, every waiter looks at once (events may have been missed).
# Looking often costs ordinary requests much of their throughput with hundreds of waiters
# held; every 30 s costs little (docs/benchmarks.md, "Waiting and webhooks").
RECHECK_SECONDS = 30.0
HEARTBEAT_SECONDS = 15.0
MAX_RESULTS = 50


class Hub:
    """The waiters of this process, by mailbox id, and the one subscription that wakes them."""

    def __init__(self) -> None:
        self.waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self.listener: asyncio.Task | None = None

    def register(self, mailbox_id) -> asyncio.Event:
        if settings.RELAY_EVENTS_REDIS_URL and (self.listener is None or self.listener.done()):
            self.listener = asyncio.get_running_loop().create_task(self.listen())
        event = asyncio.Event()
        self.waiters[str(mailbox_id)].add(event)
        return event

    def unregister(self, mailbox_id, event: asyncio.Event) -> None:
        key = str(mailbox_id)
        self.waiters[key].discard(event)
        if not self.waiters[key]:
            del self.waiters[key]

    async def listen(self) -> None:
        """Read `relay:mailbox:*` for as long as anyone waits; reconnect after a failure."""
        failures = 0
        while self.waiters:
            client = aioredis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL, socket_connect_timeout=2)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.psubscribe(CHANNEL_PREFIX + "*")
                    await pubsub.subscribe(revocations.CHANNEL)
                    failures = 0
                    self.wake_all()  # what happened while unsubscribed is looked at now
                    while self.waiters:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message and message["type"] == "message":
                            # A key or an account was revoked: every waiter authenticates
                            # again, and those whose key it was end.
                            self.wake_all()
                        elif message and message["type"] == "pmessage":
                            key = message["channel"].decode()[len(CHANNEL_PREFIX):]
                            for event in self.waiters.get(key, ()):
                                event.set()
            except (aioredis.RedisError, OSError) as exc:
                failures += 1
                logger.warning("lost the mailbox-event subscription (%s); reconnecting", exc)
                await asyncio.sleep(min(5.0, 0.2 * 2 ** failures))
            finally:
                await client.aclose()

    def wake_all(self) -> None:
        for events in self.waiters.values():
            for event in events:
                event.set()

    async def wait(self, event: asyncio.Event, timeout: float) -> None:
        """Until `event` is set (then cleared) or `timeout` passes."""
        limit = RECHECK_SECONDS if settings.RELAY_EVENTS_REDIS_URL else POLL_SECONDS
        try:
            await asyncio.wait_for(event.wait(), timeout=max(0.0, min(timeout, limit)))
        except TimeoutError:
            pass
        event.clear()


hub = Hub()


# --- the shared steps -------------------------------------------------------------------------
def _authenticate(request) -> Principal:
    result = BearerAuthentication().authenticate(request)
    if result is None:
        raise exceptions.NotAuthenticated("Authentication credentials were not provided.")
    return result[0]


def _messages_after(mailbox, after: int, search: dict):
    return selectors.message_search(caller=None, mailbox=mailbox, **search).filter(id__gt=after)


def _new_messages(mailbox, after: int, *, ascending: bool, page: int = 1, size: int = MAX_RESULTS,
                  search: dict | None = None) -> list[dict]:
    search = search or {}
    rows = _messages_after(mailbox, after, search)
    rows = rows.order_by("id") if ascending else rows
    start = (page - 1) * size
    with selectors.words_search_plan(search.get("words", "")):
        return MessageSummarySerializer(list(rows[start:start + size]), many=True).data


def _count_after(mailbox, after: int, search: dict) -> int:
    with selectors.words_search_plan(search.get("words", "")):
        return _messages_after(mailbox, after, search).count()


def _check_cursor(caller, mailbox_id, after: int) -> None:
    mailbox = selectors.mailbox_get_active(caller=caller, mailbox_id=mailbox_id)
    selectors.message_cursor_check(messages=selectors.message_list(mailbox=mailbox), after=after)


def _look(request, mailbox_id, after: int, ascending: bool, page: int = 1, size: int = MAX_RESULTS,
          search: dict | None = None):
    """The mailbox as it is now (expired on the spot if due: raises MailboxExpired) and
    one page of its messages after `after` that match `search` (message_search's filters).
    The caller is authenticated again on every look, so a key revoked while its request
    is held is refused (401/403) at the next look (docs/api.md, "Keys and revocation")."""
    caller = _authenticate(request)
    mailbox = selectors.mailbox_get_active(caller=caller, mailbox_id=mailbox_id)
    return mailbox, _new_messages(mailbox, after, ascending=ascending, page=page, size=size, search=search)


async def _start(request, mailbox_id, query_serializer) -> tuple[Principal, dict]:
    caller = await sync_to_async(_authenticate)(request)
    query = query_serializer(data=request.GET)
    query.is_valid(raise_exception=True)
    return caller, query.validated_data


def _error_response(exc: Exception) -> JsonResponse:
    """The error body (docs/api.md, "Errors") for what the async views can meet: bad
    credentials (401/403), a bad query (400), a domain error (404, 410) or too many open
    waits (429)."""
    if isinstance(exc, exceptions.APIException) and not isinstance(exc, exceptions.ValidationError):
        response = JsonResponse(error_body(exc.status_code, str(exc.detail)), status=exc.status_code)
        if exc.status_code == 401:
            response["WWW-Authenticate"] = BearerAuthentication().authenticate_header(None)
        return response
    return json_error_response(exc)


# --- GET /mailboxes/{id}/messages?wait=S&after=MID -----------------------------------------------
async def wait_for_messages(request, mailbox_id):
    """Messages after `after` (all when absent) that match the search filters, newest
    first, held up to `wait` seconds until there is one. 410 if the mailbox expires
    meanwhile, 404 if it is deleted; 429 past the caller's open waits."""
    place = None
    try:
        caller, query = await _start(request, mailbox_id, WaitQuerySerializer)
        search = WaitQuerySerializer.filters(query)
        # Checked once, here; each look then only asks for ids above it.
        after = search.pop("after") or 0
        if after:
            await sync_to_async(_check_cursor)(caller, mailbox_id, after)
        deadline = time.monotonic() + query["wait"]
        place = OpenWait(caller_key(caller))
        await sync_to_async(place.take)()
        event = hub.register(mailbox_id)
        try:
            while True:
                mailbox, results = await sync_to_async(_look)(request, mailbox_id, after, False, query["page"],
                                                               query["page_size"], search)
                left = deadline - time.monotonic()
                if results or left <= 0:
                    count = await sync_to_async(_count_after)(mailbox, after, search)
                    return JsonResponse({"count": count, "next": None, "previous": None, "results": results})
                until_expiry = (mailbox.expires_at.timestamp() - time.time()) + 0.05
                await hub.wait(event, min(left, max(until_expiry, 0.0)))
        finally:
            hub.unregister(mailbox_id, event)
    except (exceptions.APIException, RelayError) as exc:
        return _error_response(exc)
    finally:
        if place is not None:
            place.give_back()  # one quick Redis call; also when the client went away


# --- GET /mailboxes/{id}/events ----------------------------------------------------------------------
def _sse(event: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _latest_id(caller, mailbox_id) -> int:
    mailbox = selectors.mailbox_get_active(caller=caller, mailbox_id=mailbox_id)
    return selectors.message_list(mailbox=mailbox).values_list("id", flat=True).first() or 0


def _ended(caller, mailbox_id) -> dict:
    """What the closing `expired` event says (the mailbox as a client sees it now)."""
    from api.serializers import MailboxSerializer

    try:
        return MailboxSerializer(selectors.mailbox_get(caller=caller, mailbox_id=mailbox_id)).data
    except RelayError:
        return {"id": str(mailbox_id), "status": MailboxStatus.DELETED}


async def mailbox_events(request, mailbox_id):
    """text/event-stream: `message` events (id = the message's id), a comment every
    HEARTBEAT_SECONDS, and `expired` when the mailbox ends, which closes the stream.
    `Last-Event-ID` resumes after that message; without it, only new mail is sent."""
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    place = None
    try:
        caller, _ = await _start(request, mailbox_id, EventsQuerySerializer)
        resume = request.headers.get("Last-Event-ID", "").strip()
        after = int(resume) if resume.isdigit() and len(resume) < 19 else await sync_to_async(_latest_id)(
            caller, mailbox_id)
        # Checked before the stream starts, so a wrong id is a plain 404/410.
        await sync_to_async(selectors.mailbox_get_active)(caller=caller, mailbox_id=mailbox_id)
        place = OpenWait(caller_key(caller))
        await sync_to_async(place.take)()
    except (exceptions.APIException, RelayError) as exc:
        return _error_response(exc)

    async def stream():
        nonlocal after
        event = hub.register(mailbox_id)
        last_sent = time.monotonic()
        try:
            yield ": connected\n\n"
            while True:
                try:
                    mailbox, results = await sync_to_async(_look)(request, mailbox_id, after, True)
                except (exceptions.APIException, Forbidden) as exc:
                    # The key was revoked, or its account suspended, while the stream was open.
                    logger.info("closed an event stream of mailbox %s: %s", mailbox_id, exc)
                    yield f": {' '.join(str(exc).split())}\n\n"
                    return
                except RelayError:
                    yield _sse("expired", await sync_to_async(_ended)(caller, mailbox_id))
                    return
                for item in results:
                    after = item["id"]
                    yield _sse("message", item, item["id"])
                    last_sent = time.monotonic()
                if len(results) == MAX_RESULTS:
                    continue  # more are waiting
                if time.monotonic() - last_sent >= HEARTBEAT_SECONDS:
                    yield ": keep-alive\n\n"
                    last_sent = time.monotonic()
                    await sync_to_async(place.renew)()
                until_expiry = (mailbox.expires_at.timestamp() - time.time()) + 0.05
                heartbeat_in = HEARTBEAT_SECONDS - (time.monotonic() - last_sent)
                await hub.wait(event, max(0.0, min(until_expiry, heartbeat_in)))
        finally:
            hub.unregister(mailbox_id, event)
            place.give_back()

    response = StreamingHttpResponse(stream(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass events through at once
    return response
