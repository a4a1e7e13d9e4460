"""Per-client rate limits (anonymous creation, sign-up, activation, recovery, sign-in, OAuth
registration), counted so that N tries at once from one client never pass a limit below N.

A limit of `count/period` is a window that opens at a client's first try and lasts the
period: each try is one increment of the window's counter, made and read in one step. A
read, then a write (DRF's throttle history) lets every try that reads before the others
write pass. In the events Redis (RELAY_EVENTS_REDIS_URL, which every web process shares)
the window is a key set to expire with it and `INCR`ed in the same transaction; Redis's
clock times it, and its time to live is the Retry-After. Without that Redis the shared
cache counts (`add`, then `incr`): atomic where the cache's `incr` is (Redis, memcached),
a read and a write on the database cache of a one-machine install (docs/configuration.md)."""
import math
import time

from django.core.cache import cache

from core.redis_clients import events_redis

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
REDIS_TIMEOUT_SECONDS = 5.0


def rate_of(rate: str) -> tuple[int, int]:
    """("20/hour") → (20, 3600): how many tries a window allows, and its seconds."""
    count, _, period = rate.partition("/")
    return int(count), PERIODS[period[:1]]


def rate_limit_take(*, scope: str, ident: str, rate: str) -> int:
    """Counts one try of client `ident` against `scope`'s `rate`: 0 when it is within the
    rate, else the seconds until its window ends (at least 1)."""
    allowed, seconds = rate_of(rate)
    key = f"relay:rate:{scope}:{ident}"
    client = events_redis(timeout=REDIS_TIMEOUT_SECONDS)
    if client is not None:
        transaction = client.pipeline(transaction=True)
        transaction.set(key, 0, ex=seconds, nx=True)
        transaction.incr(key)
        transaction.ttl(key)
        _, tries, left = transaction.execute()
        return 0 if tries <= allowed else max(1, left)
    return _cache_take(key, allowed, seconds)


def _cache_take(key: str, allowed: int, seconds: int) -> int:
    # A fixed window by this process's clock: the cache API cannot tell a key's time to live.
    window = int(time.time() // seconds)
    key = f"{key}:{window}"
    cache.add(key, 0, seconds)
    try:
        tries = cache.incr(key)
    except ValueError:  # expired between the two calls: this try opens the next window
        cache.add(key, 0, seconds)
        tries = cache.incr(key)
    if tries <= allowed:
        return 0
    return max(1, math.ceil((window + 1) * seconds - time.time()))
