"""Revocation on the very next request in every web process: one Redis counter raised
after each commits (cached credentials trusted while it stands, `Cache`), and a PUBLISH on
`relay:revoked`."""
import logging
import time
import weakref
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import transaction

from accounts.redis_clients import events_redis

logger = logging.getLogger(__name__)

COUNTER = "relay:revocations"
CHANNEL = "relay:revoked"
# After Redis fails, this long without asking it (every request would otherwise wait
# for its timeout): keys are looked up in the database meanwhile.
PAUSE_AFTER_FAILURE_SECONDS = 5.0

# Every request asks: a Redis that does not answer at once counts as failing.
TIMEOUT_SECONDS = 0.5
_paused_until = 0.0


def _connection() -> redis.Redis | None:
    return events_redis(timeout=TIMEOUT_SECONDS)


def _redis() -> redis.Redis | None:
    return None if time.monotonic() < _paused_until else _connection()


def _failed(action: str, exc: Exception) -> None:
    global _paused_until
    _paused_until = time.monotonic() + PAUSE_AFTER_FAILURE_SECONDS
    logger.warning("could not %s the revocation counter in Redis (%s); keys are looked up on every request "
                   "for the next %.0f s", action, exc, PAUSE_AFTER_FAILURE_SECONDS)


def current() -> int | None:
    """The revocation counter, or None when there is none to trust (no Redis, or Redis
    failing): then nothing may be served from a cache."""
    client = _redis()
    if client is None:
        return None
    try:
        return int(client.get(COUNTER) or 0)
    except (redis.RedisError, ValueError) as exc:
        _failed("read", exc)
        return None


def announce() -> None:
    """Tell every web process of a revocation once the transaction commits."""
    transaction.on_commit(_announce_now)


def _announce_now() -> None:
    client = _connection()  # even while reads are paused: a revocation is worth one slow call
    if client is None:
        return
    try:
        with client.pipeline(transaction=False) as pipe:
            pipe.incr(COUNTER)
            pipe.publish(CHANNEL, "revoked")
            pipe.execute()
    except redis.RedisError as exc:
        # The others cannot read it either, so do not cache; else their entries age out.
        logger.error("could not announce a revocation (%s): other web processes may accept the key for up to "
                     "RELAY_KEY_CACHE_SECONDS", exc)


class Cache:
    """A per-process cache of credentials (API keys, OAuth access tokens, the web inbox's
    signed-in sessions), each entry trusted while the revocation counter stands where it
    stood when the entry was made, for at most RELAY_KEY_CACHE_SECONDS, and `max_entries` of
    them. Nothing is cached without a counter to trust (no Redis, or Redis failing)."""

    every: "weakref.WeakSet[Cache]" = weakref.WeakSet()  # forget_account and clear_all reach each of them

    def __init__(self, *, account_of: Callable[[object], int | None], copy: Callable = lambda value: value,
                 max_entries: int = 10_000) -> None:
        Cache.every.add(self)
        self.account_of = account_of  # the account an entry speaks for, to forget it with the account
        self.copy = copy  # each caller its own copy, when a request may change what it gets
        self.max_entries = max_entries
        # key -> (fresh until, the counter read before the value's row was, the value)
        self.entries: dict[str, tuple[float, int, object]] = {}

    def get(self, key: str, load: Callable[[], object | None]):
        """The cached value of `key`, or `load()`'s (None: nothing live), cached when it can be."""
        lifetime = settings.RELAY_KEY_CACHE_SECONDS
        # Read before the database: a revocation committing meanwhile moves it past the entry's.
        version = current() if lifetime > 0 else None
        entry = self.entries.get(key)
        if entry is not None and version is not None and entry[1] == version and entry[0] > time.monotonic():
            return self.copy(entry[2])
        value = load()
        if value is not None and version is not None:
            if len(self.entries) >= self.max_entries:
                self.entries.clear()
            self.entries[key] = (time.monotonic() + lifetime, version, self.copy(value))
        elif entry is not None:
            self.entries.pop(key, None)
        return value

    def forget(self, key: str) -> None:
        self.entries.pop(key, None)

    def forget_account(self, account_id: int) -> None:
        for key, (_, _, value) in list(self.entries.items()):
            if self.account_of(value) == account_id:
                self.entries.pop(key, None)

    def clear(self) -> None:
        self.entries.clear()


def forget_account(account_id: int) -> None:
    """This process forgets every credential it cached for the account (each other process
    before its next request, by the counter)."""
    for cache in Cache.every:
        cache.forget_account(account_id)


def clear_all() -> None:
    for cache in Cache.every:
        cache.clear()
