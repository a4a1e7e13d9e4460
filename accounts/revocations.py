"""Revocation that takes effect on the very next request, on every web process
(docs/api.md, "Keys and revocation").

Each web process keeps what a key resolved to (accounts.services), so a request costs no
key lookup. What makes that safe is one counter in Redis that every revocation raises
after it commits: a deleted key, the keys a recovery replaces, a suspension. A process
reads the counter on every request (one GET) and trusts a cached key only if the counter
still reads what it read just before that key's row was loaded. The same revocation is PUBLISHed on `relay:revoked`, so
the web processes wake their held waits and event streams, which then authenticate
again and end.

Without Redis there is no shared counter, and no process caches keys at all. When Redis
stops answering, the processes stop caching (and look again after a pause), so a
revocation is never missed for want of the counter."""
import logging
import time

import redis
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

COUNTER = "relay:revocations"
CHANNEL = "relay:revoked"
# After Redis fails, this long without asking it (every request would otherwise wait
# for its timeout): keys are looked up in the database meanwhile.
PAUSE_AFTER_FAILURE_SECONDS = 5.0

_client: redis.Redis | None = None
_paused_until = 0.0


def _connection() -> redis.Redis | None:
    global _client
    if not settings.RELAY_EVENTS_REDIS_URL:
        return None
    if _client is None:
        _client = redis.Redis.from_url(settings.RELAY_EVENTS_REDIS_URL, socket_timeout=0.5,
                                       socket_connect_timeout=0.5)
    return _client


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
    """Tell every web process that a key or an account was revoked, once the current
    transaction commits: a process that reloads a key on seeing the counter move must
    find the revocation already in the database."""
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
        # The other processes cannot read the counter either while Redis is down, so they
        # do not cache; if only this write failed, their entries age out within
        # RELAY_KEY_CACHE_SECONDS.
        logger.error("could not announce a revocation (%s): other web processes may accept the key for up to "
                     "RELAY_KEY_CACHE_SECONDS", exc)
