"""Waiting for mail without a thread per waiter: `GET …/messages?wait=S` and the event
stream `GET …/events`, async views woken by the web process's one Redis subscription
(`relay:mailbox:*` and revocations; they look again every RECHECK_SECONDS anyway), each
counted among its caller's open waits (RELAY_MAX_OPEN_WAITS, then 429) in Redis with
leases across web processes, each process alone without Redis, let through if it fails."""
import asyncio
import json
import logging
import threading
import time
import uuid
from collections import Counter, defaultdict

import redis
from django.conf import settings
from django.http import HttpResponseNotAllowed, JsonResponse, StreamingHttpResponse
from rest_framework import exceptions

from accounts import identity
from accounts.inputs import whole_number
from core.redis_clients import events_redis, events_subscription_client
from api.authentication import (WAITS, BearerAuthentication, InsufficientScope, Principal, insufficient_scope,
                                scope_covers)
from api.errors import error_body, json_error_response
from api.fields import validated
from api.pagination import PAGE_SIZE
from core.pools import in_pool
from api.serializers import (EventsQuerySerializer, MessageDetailSerializer, MessageSummarySerializer,
                             WaitQuerySerializer, message_codes)
from mailboxes import wakeups
from mailboxes.errors import Forbidden, RateLimited, RelayError
from mailboxes.messages import message_mark_read
from mailboxes.models import Direction, Mailbox, MailboxStatus
from core.clock import db_now
from relay import reading

logger = logging.getLogger(__name__)


HEARTBEAT_SECONDS = 15.0
MAX_RESULTS = PAGE_SIZE


# --- the wake-ups ----------------------------------------------------------------------------
POLL_SECONDS = 0.5
# A backstop only: with a live subscription no event is lost, and each (re)connect makes
# every waiter look at once.
RECHECK_SECONDS = 30.0


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
            client = events_subscription_client(connect_timeout=2)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.psubscribe(wakeups.CHANNEL_PREFIX + "*")
                    await pubsub.subscribe(identity.REVOKED_CHANNEL)
                    failures = 0
                    self.wake_all()  # what happened while unsubscribed is looked at now
                    while self.waiters:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message and message["type"] == "message":
                            # A key or an account was revoked: every waiter authenticates
                            # again, and those whose key it was end.
                            self.wake_all()
                        elif message and message["type"] == "pmessage":
                            key = message["channel"].decode()[len(wakeups.CHANNEL_PREFIX):]
                            for event in self.waiters.get(key, ()):
                                event.set()
            except (redis.RedisError, OSError) as exc:
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


# --- the open-wait count ------------------------------------------------------------------------
# A wait lasts at most 60 s; a stream renews its lease at every heartbeat.
LEASE_SECONDS = 120
RETRY_AFTER_SECONDS = 5
KEY_PREFIX = "relay:open-waits:"

_local = Counter()
_local_lock = threading.Lock()


def _redis_now(client) -> float:
    """Redis's clock (TIME): every web host counts one caller's open waits in one sorted
    set, so their leases are judged by one clock, not each host's."""
    seconds, microseconds = client.time()
    return seconds + microseconds / 1_000_000


def caller_key(caller) -> str:
    """Who the limit counts: the account, or the anonymous mailbox's token."""
    return f"account:{caller.owner.pk}" if caller.owner is not None else f"token:{caller.mailbox_id}"


def _refused(ident: str) -> RateLimited:
    logger.info("refused a wait of %s: %d already open", ident, settings.RELAY_MAX_OPEN_WAITS)
    return RateLimited(f"At most {settings.RELAY_MAX_OPEN_WAITS} waits and event streams may be open at once "
                       "per account or mailbox token; close one first.", retry_after=RETRY_AFTER_SECONDS)


class OpenWait:
    """One open wait's place in its caller's count, taken by `open_wait`."""

    def __init__(self, ident: str) -> None:
        self.key = KEY_PREFIX + ident
        self.member = uuid.uuid4().hex
        self.counted_in: str | None = None  # "redis", "local", or None (not counted)

    def take(self) -> None:
        client = _events_redis()
        if client is None:
            with _local_lock:
                if _local[self.key] >= settings.RELAY_MAX_OPEN_WAITS:
                    raise _refused(self.key)
                _local[self.key] += 1
            self.counted_in = "local"
            return
        try:
            now = _redis_now(client)
            with client.pipeline(transaction=True) as pipe:
                pipe.zremrangebyscore(self.key, "-inf", now)
                pipe.zadd(self.key, {self.member: now + LEASE_SECONDS})
                pipe.zcard(self.key)
                pipe.expire(self.key, LEASE_SECONDS)
                _, _, open_now, _ = pipe.execute()
        except redis.RedisError as exc:
            logger.warning("could not count open waits in Redis (%s); letting this one through", exc)
            return
        self.counted_in = "redis"
        if open_now > settings.RELAY_MAX_OPEN_WAITS:
            self.give_back()
            raise _refused(self.key)

    def renew(self) -> None:
        """Keep a long-lived stream counted past LEASE_SECONDS."""
        if self.counted_in != "redis":
            return
        try:
            client = _events_redis()
            now = _redis_now(client)
            with client.pipeline(transaction=False) as pipe:
                pipe.zadd(self.key, {self.member: now + LEASE_SECONDS}, xx=True)
                pipe.expire(self.key, LEASE_SECONDS)  # the set outlives its longest-lived member
                pipe.execute()
        except redis.RedisError:
            pass  # lapses at worst, which lets one more wait in: never a refusal

    def give_back(self) -> None:
        counted_in, self.counted_in = self.counted_in, None
        if counted_in == "local":
            with _local_lock:
                _local[self.key] -= 1
                if _local[self.key] <= 0:
                    del _local[self.key]
            return
        if counted_in != "redis":
            return
        try:
            _events_redis().zrem(self.key, self.member)
        except redis.RedisError as exc:
            logger.warning("could not release an open wait in Redis (%s); it lapses in %d s", exc, LEASE_SECONDS)


def _events_redis() -> redis.Redis | None:
    """The events Redis for the open-wait count, with wake-ups' timeout; None without one."""
    return events_redis(timeout=wakeups.TIMEOUT_SECONDS)


# --- the shared steps -------------------------------------------------------------------------
def _principal_of(request) -> Principal:
    result = BearerAuthentication().authenticate(request)
    if result is None:
        raise exceptions.NotAuthenticated("Authentication credentials were not provided.")
    scope_covers(result[0], WAITS)
    return result[0]


def _seconds_until(moment) -> float:
    """Seconds from now to `moment` by the database's clock, which decides when a mailbox
    ends: a waiter wakes at its end however this host's clock stands."""
    return (moment - db_now()).total_seconds()


def _messages_after(mailbox, after: int, search: dict, answer):
    """What a wait or a stream is about: mail received (sent mail only if asked for)."""
    search = {**search, "direction": search.get("direction") or Direction.IN}
    with reading.messages_read(caller=None, mailbox=mailbox, search=search) as rows:
        return answer(rows.filter(id__gt=after))


def _new_messages(mailbox, after: int, *, ascending: bool, page: int = 1, size: int = MAX_RESULTS,
                  search: dict | None = None) -> list[dict]:
    start = (page - 1) * size
    return _messages_after(mailbox, after, search or {}, lambda rows: MessageSummarySerializer.represent_many(
        (rows.order_by("id") if ascending else rows)[start:start + size]))


def _count_after(mailbox, after: int, search: dict) -> int:
    return _messages_after(mailbox, after, search, lambda rows: rows.count())


def _open_fresh(caller, mailbox_id, after: int = 0) -> Mailbox:
    """Open the mailbox for a wait or a stream (relay.reading.mailbox_open), with the mail
    server's newest deliveries; later news comes by the poll's wake-up."""
    return reading.mailbox_open(caller=caller, mailbox_id=mailbox_id, after=after, fresh=True)


def _messages_now(authenticate, mailbox_id, after: int, *, ascending: bool, page: int = 1, size: int = MAX_RESULTS,
          search: dict | None = None, caller: Principal | None = None):
    """The mailbox now (MailboxExpired once it ended) and a page of its messages after
    `after`; authenticated again at each look after a wait, so a revoked key is refused."""
    caller = caller or authenticate()
    mailbox = reading.mailbox_open(caller=caller, mailbox_id=mailbox_id)
    return mailbox, _new_messages(mailbox, after, ascending=ascending, page=page, size=size, search=search)


async def _start(request, mailbox_id, query_serializer) -> tuple[Principal, dict]:
    caller = await in_pool(_principal_of)(request)
    return caller, validated(query_serializer, request.GET)


def error_response(exc: Exception, request) -> JsonResponse:
    """The error body (docs/api.md, "Errors") for what the async views can meet."""
    if isinstance(exc, exceptions.APIException) and not isinstance(exc, exceptions.ValidationError):
        response = JsonResponse(error_body(exc.status_code, str(exc.detail)), status=exc.status_code)
        if exc.status_code == 401:
            response["WWW-Authenticate"] = BearerAuthentication().authenticate_header(request)
        if isinstance(exc, InsufficientScope):
            response["WWW-Authenticate"] = insufficient_scope(exc.scope)
        return response
    return json_error_response(exc)


async def wait_until_found(caller, mailbox_id, seconds: float, look):
    """Call `look(caller)` until it finds something or `seconds` pass, woken by the mailbox's
    channel; an open-wait slot held meanwhile. `caller` is None after a wait: authenticate again."""
    deadline = time.monotonic() + seconds
    open_wait = OpenWait(caller_key(caller))
    await in_pool(open_wait.take)()
    try:
        event = hub.register(mailbox_id)
        try:
            authenticated = caller  # just now: the first look need not authenticate again
            while True:
                mailbox, found = await in_pool(look)(authenticated)
                authenticated = None
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return mailbox, found
                until_expiry = await in_pool(_seconds_until)(mailbox.expires_at) + 0.05
                await hub.wait(event, min(left, max(until_expiry, 0.0)))
        finally:
            hub.unregister(mailbox_id, event)
    finally:
        open_wait.give_back()  # one quick Redis call


# --- GET /mailboxes/{id}/messages?wait=S&after=MID -----------------------------------------------
async def wait_for_messages(request, mailbox_id):
    """Messages after `after` matching the filters, newest first, held up to `wait` seconds
    until there is one (410 if the mailbox expires meanwhile, 429 past the open waits)."""
    try:
        caller, query = await _start(request, mailbox_id, WaitQuerySerializer)
        search = WaitQuerySerializer.filters(query)
        # Checked once, here; each look then only asks for ids above it.
        after = search.pop("after") or 0
        await in_pool(_open_fresh)(caller, mailbox_id, after)
        mailbox, results = await wait_until_found(
            caller, mailbox_id, query["wait"], lambda authenticated: _messages_now(
                lambda: _principal_of(request), mailbox_id, after, ascending=False, page=query["page"],
                size=query["page_size"], search=search, caller=authenticated))
        count = await in_pool(_count_after)(mailbox, after, search)
        return JsonResponse({"count": count, "next": None, "previous": None, "results": results})
    except (exceptions.APIException, RelayError) as exc:
        return error_response(exc, request)


# --- the first message to come (the MCP server's wait_for_message and wait_for_code) --------------
def _first_message_now(authenticate, base_url: str, mailbox_id, cursor: list[int], search: dict, with_code: bool,
                caller: Principal | None):
    """The oldest message after `cursor[0]` matching `search` (with a code, if `with_code`:
    the cursor moves past those without), whole and marked read; None if none yet."""
    caller = caller or authenticate()
    mailbox = reading.mailbox_open(caller=caller, mailbox_id=mailbox_id)
    candidates = _messages_after(mailbox, cursor[0], search, lambda rows: list(
        rows.order_by("id").select_related("content").defer("content__raw")[:MAX_RESULTS]))
    for message in candidates:
        if with_code and not message_codes(message):
            cursor[0] = message.id
            continue
        message_mark_read(message=message)
        return mailbox, MessageDetailSerializer(message, context={"base_url": base_url}).data
    return mailbox, None


async def first_message(*, caller: Principal, authenticate, base_url: str, mailbox_id, seconds: float, search: dict,
                        with_code: bool = False):
    """The first message matching `search` (relay.reading.search_of's), held up to `seconds`:
    whole and marked read, or None; raises what the wait route answers. MCP's
    wait_for_message and wait_for_code; `base_url` starts its download URLs."""
    search = dict(search)
    after = search.pop("after") or 0
    await in_pool(_open_fresh)(caller, mailbox_id, after)
    cursor = [after]
    _, found = await wait_until_found(caller, mailbox_id, seconds, lambda authenticated: _first_message_now(
        authenticate, base_url, mailbox_id, cursor, search, with_code, authenticated))
    return found


# --- GET /mailboxes/{id}/events ----------------------------------------------------------------------
def _sse(event: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _latest_id(caller, mailbox_id) -> int:
    mailbox = reading.mailbox_open(caller=caller, mailbox_id=mailbox_id)
    return reading.message_list(mailbox=mailbox).values_list("id", flat=True).first() or 0


def _ended(caller, mailbox_id) -> dict:
    """What the closing `expired` event says (the mailbox as a client sees it now)."""
    from api.serializers import MailboxSerializer

    try:
        return MailboxSerializer.represent(reading.mailbox_open(caller=caller, mailbox_id=mailbox_id, live=False))
    except RelayError:
        return {"id": str(mailbox_id), "status": MailboxStatus.DELETED}


async def mailbox_events(request, mailbox_id):
    """text/event-stream: `message` events (id = the message's id), heartbeats, and
    `expired`, which closes it. `Last-Event-ID` resumes after that message."""
    return await event_stream(request, mailbox_id, lambda: _principal_of(request))


async def event_stream(request, mailbox_id, authenticate):
    """The event stream of mailbox `mailbox_id` for whoever `authenticate()` says is asking
    (asked again at every look: the API's bearer credentials, the web inbox's session)."""
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    try:
        caller = await in_pool(authenticate)()
        validated(EventsQuerySerializer, request.GET)
        # Checked before the stream starts, so a wrong id is a plain 404/410.
        await in_pool(_open_fresh)(caller, mailbox_id)
        resume = request.headers.get("Last-Event-ID", "").strip()
        after = whole_number(resume, field="Last-Event-ID")
        if after is None:
            after = await in_pool(_latest_id)(caller, mailbox_id)
        open_wait = OpenWait(caller_key(caller))
        await in_pool(open_wait.take)()
    except (exceptions.APIException, RelayError) as exc:
        return error_response(exc, request)

    async def stream():
        nonlocal after
        event = hub.register(mailbox_id)
        last_sent = time.monotonic()
        try:
            yield ": connected\n\n"
            while True:
                try:
                    mailbox, results = await in_pool(_messages_now)(authenticate, mailbox_id, after, ascending=True)
                except (exceptions.APIException, Forbidden) as exc:
                    # The key was revoked, or its account suspended, while the stream was open.
                    logger.info("closed an event stream of mailbox %s: %s", mailbox_id, exc)
                    yield f": {' '.join(str(exc).split())}\n\n"
                    return
                except RelayError:
                    yield _sse("expired", await in_pool(_ended)(caller, mailbox_id))
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
                    await in_pool(open_wait.renew)()
                until_expiry = await in_pool(_seconds_until)(mailbox.expires_at) + 0.05
                heartbeat_in = HEARTBEAT_SECONDS - (time.monotonic() - last_sent)
                await hub.wait(event, max(0.0, min(until_expiry, heartbeat_in)))
        finally:
            hub.unregister(mailbox_id, event)
            open_wait.give_back()

    response = StreamingHttpResponse(stream(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass events through at once
    return response
