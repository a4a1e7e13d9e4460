"""Holding clients open without a thread each: a hub that wakes a process's waiters from one
Redis subscription, and a count of each caller's open waits shared by every web process.
What a waiter waits for, and who counts as one caller, is the app's (relay/live.py for
mailboxes); here only keys and channels."""
import asyncio
import logging
import threading
import uuid
from collections import Counter, defaultdict

import redis
from django.conf import settings

from core.redis_clients import events_redis, events_subscription_client

logger = logging.getLogger(__name__)

# Without Redis nothing wakes a waiter: it looks this often instead.
POLL_SECONDS = 0.5
# A backstop only: with a live subscription no event is lost, and each (re)connect makes
# every waiter look at once.
RECHECK_SECONDS = 30.0
# The open-wait count's calls give up after this long: a slow Redis must not hold a wait.
REDIS_TIMEOUT_SECONDS = 2


class Hub:
    """The waiters of this process, by key, and the one subscription that wakes them: a
    message on `prefix + key` wakes that key's waiters, one on `everyone` wakes them all."""

    def __init__(self, *, prefix: str, everyone: str) -> None:
        self.prefix, self.everyone = prefix, everyone
        self.waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self.listener: asyncio.Task | None = None

    def register(self, key) -> asyncio.Event:
        if settings.RELAY_EVENTS_REDIS_URL and (self.listener is None or self.listener.done()):
            self.listener = asyncio.get_running_loop().create_task(self.listen())
        event = asyncio.Event()
        self.waiters[str(key)].add(event)
        return event

    def unregister(self, key, event: asyncio.Event) -> None:
        key = str(key)
        self.waiters[key].discard(event)
        if not self.waiters[key]:
            del self.waiters[key]

    async def listen(self) -> None:
        """Read the channels for as long as anyone waits; reconnect after a failure."""
        failures = 0
        while self.waiters:
            client = events_subscription_client(connect_timeout=2)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.psubscribe(self.prefix + "*")
                    await pubsub.subscribe(self.everyone)
                    failures = 0
                    self.wake_all()  # what happened while unsubscribed is looked at now
                    while self.waiters:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message and message["type"] == "message":
                            self.wake_all()
                        elif message and message["type"] == "pmessage":
                            key = message["channel"].decode()[len(self.prefix):]
                            for event in self.waiters.get(key, ()):
                                event.set()
            except (redis.RedisError, OSError) as exc:
                failures += 1
                logger.warning("lost the wake-up subscription (%s); reconnecting", exc)
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


# --- the open-wait count ------------------------------------------------------------------------
# A wait lasts at most 60 s; a stream renews its lease at every heartbeat.
LEASE_SECONDS = 120
KEY_PREFIX = "relay:open-waits:"

_local = Counter()
_local_lock = threading.Lock()


def _redis_now(client) -> float:
    """Redis's clock (TIME): every web host counts one caller's open waits in one sorted
    set, so their leases are judged by one clock, not each host's."""
    seconds, microseconds = client.time()
    return seconds + microseconds / 1_000_000


def _events_redis() -> redis.Redis | None:
    return events_redis(timeout=REDIS_TIMEOUT_SECONDS)


class OpenWait:
    """One open wait's place among its caller's (`ident`), at most RELAY_MAX_OPEN_WAITS:
    in Redis with leases across web processes, each process alone without Redis, let
    through if Redis fails."""

    def __init__(self, ident: str) -> None:
        self.ident = ident
        self.key = KEY_PREFIX + ident
        self.member = uuid.uuid4().hex
        self.counted_in: str | None = None  # "redis", "local", or None (not counted)

    def take(self) -> bool:
        """Count this wait in; False (and not counted) when the caller has no room left."""
        client = _events_redis()
        if client is None:
            with _local_lock:
                if _local[self.key] >= settings.RELAY_MAX_OPEN_WAITS:
                    return False
                _local[self.key] += 1
            self.counted_in = "local"
            return True
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
            return True
        self.counted_in = "redis"
        if open_now > settings.RELAY_MAX_OPEN_WAITS:
            self.give_back()
            return False
        return True

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
