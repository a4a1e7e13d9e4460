"""One limit on calls to the mail backend for all workers: RELAY_BACKEND_MAX_CONCURRENT at
once and RELAY_BACKEND_MAX_PER_MINUTE, in Redis (one Lua script) or in a table under a lock."""
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta

import redis
from django.conf import settings
from django.db import transaction

from core.redis_clients import redis_client
from core.storage import serialized_now
from relay import metrics
from relay.backends import NoBackendSlot
from relay.models import BackendCallSlot

# A call counts a little more than a minute: the backend starts its minute a moment later.
WINDOW_MS = 60_500
KEY_HOLDERS = "relay:backend:holders"
KEY_STARTS = "relay:backend:starts"
# Returns {1, 0} when a slot was taken, or {0, ms} with the wait until one might free.
TAKE_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token, hold_ms = ARGV[1], tonumber(ARGV[2])
local max_concurrent, max_per_minute, window_ms = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local busy_wait_ms = tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window_ms)
if redis.call('ZCARD', KEYS[1]) >= max_concurrent then
  return {0, busy_wait_ms}
end
if redis.call('ZCARD', KEYS[2]) >= max_per_minute then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, math.max(1, tonumber(oldest[2]) + window_ms - now)}
end
redis.call('ZADD', KEYS[1], now + hold_ms, token)
redis.call('ZADD', KEYS[2], now, token)
redis.call('PEXPIRE', KEYS[1], hold_ms + 60000)
redis.call('PEXPIRE', KEYS[2], window_ms * 2)
return {1, 0}
"""


class Limiter:
    """What both forms share: wait for a slot up to a deadline, hold it for one call."""

    # How long to wait before asking again when every slot is held (a call frees one).
    BUSY_WAIT_MS = 20

    def __init__(self, *, max_concurrent: int, max_per_minute: int, hold_seconds: float) -> None:
        self.max_concurrent, self.max_per_minute = max_concurrent, max_per_minute
        self.hold_ms = int(hold_seconds * 1000)

    def try_take(self, token: str) -> tuple[bool, int]:
        """Take a slot for `token`, or say how many milliseconds until one might free."""
        raise NotImplementedError

    def release(self, token: str) -> None:
        raise NotImplementedError

    @contextmanager
    def slot(self, *, max_wait: float):
        """Hold a slot for one call; raise NoBackendSlot if none frees within `max_wait`."""
        token = uuid.uuid4().hex
        deadline = time.monotonic() + max_wait
        waited = False
        while True:
            taken, wait_ms = self.try_take(token)
            if taken:
                break
            if not waited:
                waited = True
                metrics.LIMITER_WAITS.inc()
            left = deadline - time.monotonic()
            if left <= 0 or wait_ms / 1000 > left:
                metrics.LIMITER_GAVE_UP.inc()
                raise NoBackendSlot("no backend call slot free (Relay's own limit)", retry_after=max(wait_ms / 1000, 0.5))
            time.sleep(min(wait_ms / 1000, left))
        try:
            yield
        finally:
            self.release(token)


class RedisLimiter(Limiter):
    def __init__(self, url: str, **limits) -> None:
        super().__init__(**limits)
        self.client = redis_client(url, timeout=5)
        self.take = self.client.register_script(TAKE_SLOT)

    def try_take(self, token: str) -> tuple[bool, int]:
        taken, wait_ms = self.take(keys=[KEY_HOLDERS, KEY_STARTS],
                                   args=[token, self.hold_ms, self.max_concurrent, self.max_per_minute, WINDOW_MS,
                                         self.BUSY_WAIT_MS])
        return bool(taken), int(wait_ms)

    def release(self, token: str) -> None:
        try:
            self.client.zrem(KEY_HOLDERS, token)
        except redis.RedisError:
            pass  # the hold expires by itself


WINDOW = timedelta(milliseconds=WINDOW_MS)


class DatabaseLimiter(Limiter):
    # Each ask is a transaction under one lock: poll less eagerly than Redis.
    BUSY_WAIT_MS = 50

    def try_take(self, token: str) -> tuple[bool, int]:
        with transaction.atomic():
            # Every worker waits on this lock, so the time inside it is everyone's. The
            # delete comes first: on SQLite that write is what takes the lock.
            now = serialized_now()
            BackendCallSlot.objects.filter(started_at__lte=now - WINDOW).exclude(hold_until__gt=now).delete()
            if BackendCallSlot.objects.filter(hold_until__gt=now).count() >= self.max_concurrent:
                return False, self.BUSY_WAIT_MS
            in_window = BackendCallSlot.objects.filter(started_at__gt=now - WINDOW)
            if in_window.count() >= self.max_per_minute:
                oldest = in_window.order_by("started_at").values_list("started_at", flat=True).first()
                return False, max(1, int((oldest + WINDOW - now).total_seconds() * 1000))
            BackendCallSlot.objects.create(token=token, started_at=now,
                                           hold_until=now + timedelta(milliseconds=self.hold_ms))
        return True, 0

    def release(self, token: str) -> None:
        BackendCallSlot.objects.filter(token=token).update(hold_until=None)


_limiter = None


def backend_limiter() -> Limiter:
    """The process's limiter: in Redis when Redis is configured, else in the database."""
    global _limiter
    if _limiter is None:
        limits = {"max_concurrent": settings.RELAY_BACKEND_MAX_CONCURRENT,
                  "max_per_minute": settings.RELAY_BACKEND_MAX_PER_MINUTE,
                  "hold_seconds": settings.RELAY_BACKEND_SLOT_HOLD_SECONDS}
        if settings.RELAY_EVENTS_REDIS_URL:
            _limiter = RedisLimiter(settings.RELAY_EVENTS_REDIS_URL, **limits)
        else:
            _limiter = DatabaseLimiter(**limits)
    return _limiter
