"""Open waits per account or mailbox token (RELAY_MAX_OPEN_WAITS, then 429), counted in Redis
with leases across web processes; each process alone without Redis, let through if it fails."""
import logging
import threading
import uuid
from collections import Counter
from contextlib import contextmanager

import redis
from django.conf import settings

from mailboxes.errors import RateLimited
from mailboxes.wakeups import redis_client as _redis

logger = logging.getLogger(__name__)

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
        client = _redis()
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
            client = _redis()
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
            _redis().zrem(self.key, self.member)
        except redis.RedisError as exc:
            logger.warning("could not release an open wait in Redis (%s); it lapses in %d s", exc, LEASE_SECONDS)


@contextmanager
def open_wait(caller):
    """Count one open wait of `caller` while the block runs; RateLimited past the cap."""
    slot = OpenWait(caller_key(caller))
    slot.take()
    try:
        yield slot
    finally:
        slot.give_back()
