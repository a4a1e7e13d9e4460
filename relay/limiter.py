"""One limit on calls to the mail backend for all workers together (SPEC §10):
RELAY_BACKEND_MAX_CONCURRENT calls at once and RELAY_BACKEND_MAX_PER_MINUTE in any
sliding minute, Stalwart's own limits, so that a burst of expiries waits its turn
instead of being refused by the backend and burning retries.

Two sorted sets in Redis, checked and taken in one Lua script (atomic, on Redis's clock):
- holders: one member per call in flight, scored by when its hold expires. A worker
  killed mid-call never releases its slot; its hold expires after RELAY_BACKEND_SLOT_HOLD_SECONDS
  (longer than any call's timeout) and the slot comes back.
- starts: one member per call started in the last minute, scored by when it started.

Without Redis (the embedded defaults, whose local backend makes no calls) there is no
limit, and a warning says so when a backend that makes calls is configured."""
import logging
import time
import uuid
from contextlib import contextmanager

import redis
from django.conf import settings

from relay.backends import NoBackendSlot

logger = logging.getLogger(__name__)

KEY_HOLDERS = "relay:backend:holders"
KEY_STARTS = "relay:backend:starts"
# Returns {1, 0} when a slot was taken, or {0, ms} with the wait until one might free.
TAKE_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token, hold_ms = ARGV[1], tonumber(ARGV[2])
local max_concurrent, max_per_minute = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
if redis.call('ZCARD', KEYS[1]) >= max_concurrent then
  return {0, 20}
end
if redis.call('ZCARD', KEYS[2]) >= max_per_minute then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, math.max(1, tonumber(oldest[2]) + 60000 - now)}
end
redis.call('ZADD', KEYS[1], now + hold_ms, token)
redis.call('ZADD', KEYS[2], now, token)
redis.call('PEXPIRE', KEYS[1], hold_ms + 60000)
redis.call('PEXPIRE', KEYS[2], 120000)
return {1, 0}
"""


class BackendLimiter:
    def __init__(self, url: str, *, max_concurrent: int, max_per_minute: int, hold_seconds: float) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.take = self.client.register_script(TAKE_SLOT)
        self.max_concurrent, self.max_per_minute = max_concurrent, max_per_minute
        self.hold_ms = int(hold_seconds * 1000)
        self.waits = 0  # how many times a call had to wait (for the logs and metrics)

    @contextmanager
    def slot(self, *, max_wait: float):
        """Hold a slot for one call; raise NoBackendSlot if none frees within `max_wait`."""
        token = uuid.uuid4().hex
        deadline = time.monotonic() + max_wait
        waited = False
        while True:
            taken, wait_ms = self.take(keys=[KEY_HOLDERS, KEY_STARTS],
                                       args=[token, self.hold_ms, self.max_concurrent, self.max_per_minute])
            if taken:
                break
            if not waited:
                waited = True
                self.waits += 1
            left = deadline - time.monotonic()
            if left <= 0 or wait_ms / 1000 > left:
                raise NoBackendSlot("no backend call slot free (Relay's own limit)", retry_after=max(wait_ms / 1000, 0.5))
            time.sleep(min(wait_ms / 1000, left))
        try:
            yield
        finally:
            try:
                self.client.zrem(KEY_HOLDERS, token)
            except redis.RedisError:
                pass  # the hold expires by itself


class NoLimit:
    @contextmanager
    def slot(self, *, max_wait: float):
        yield


_limiter = None


def backend_limiter():
    """The process's limiter: Redis-backed when Redis is configured, else no limit."""
    global _limiter
    if _limiter is None:
        if settings.RELAY_EVENTS_REDIS_URL:
            _limiter = BackendLimiter(settings.RELAY_EVENTS_REDIS_URL,
                                      max_concurrent=settings.RELAY_BACKEND_MAX_CONCURRENT,
                                      max_per_minute=settings.RELAY_BACKEND_MAX_PER_MINUTE,
                                      hold_seconds=settings.RELAY_BACKEND_SLOT_HOLD_SECONDS)
        else:
            logger.warning("no Redis configured: calls to the mail backend are not limited across workers")
            _limiter = NoLimit()
    return _limiter
