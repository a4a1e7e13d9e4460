"""Revocation on the very next request in every web process: one Redis counter raised
after each commits (cached keys trusted while it stands), and a PUBLISH on `relay:revoked`."""
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
